"""Python kernels of the `exops` ops declared in schemas/python.yaml.

The generated `runtime._reg_exops` registers each with `torch.library.Library.impl`, so a call
goes dispatcher -> function with nothing in between. They are written with torch operations only,
which makes them device-generic (registered as CompositeExplicitAutograd where the op file says
so) and traceable.
"""

from __future__ import annotations

import torch
from torch import Tensor


def signbit_mask(x: Tensor) -> Tensor:
    """True where the sign bit of `x` is set (negative numbers, -0.0, negative NaNs)."""
    return torch.signbit(x)


def row_normalize(x: Tensor, eps: float = 1e-6) -> Tensor:
    """Each row x[i] divided by its Euclidean norm plus `eps`."""
    return x / (torch.linalg.vector_norm(x, dim=-1, keepdim=True) + eps)


def row_normalize_backward(grad: Tensor, x: Tensor, eps: float) -> Tensor:
    """d row_normalize / dx applied to `grad`: for y = x / (n + eps), n = |x|,
    dx = g / (n + eps) - x * <g, x> / (n (n + eps)^2) (the second term is 0 where n = 0)."""
    n = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    d = n + eps
    dot = (grad * x).sum(dim=-1, keepdim=True)
    coef = torch.where(n > 0, dot / (n.clamp_min(torch.finfo(x.dtype).tiny) * d * d),
                       torch.zeros_like(n))
    return grad / d - x * coef


def segment_sum(values: Tensor, segment_ids: Tensor, num_segments: int) -> Tensor:
    """out[s] = sum of values[i] over the i with segment_ids[i] == s."""
    torch._check(segment_ids.dim() == 1 and segment_ids.size(0) == values.size(0),
                 lambda: "exops::segment_sum: segment_ids must be 1-D with one id per row of "
                         f"values, got {tuple(segment_ids.shape)} for {tuple(values.shape)}")
    out = values.new_zeros((num_segments, *values.shape[1:]))
    return out.index_add_(0, segment_ids, values)


def gated_residual(x: Tensor, gate: Tensor) -> Tensor:
    """x * (1 + sigmoid(gate)), `gate` broadcast to `x`; the result keeps `x`'s memory layout
    (an elementwise op's output follows its largest input's strides)."""
    return x * (1 + torch.sigmoid(gate))


def gated_residual_fake(x: Tensor, gate: Tensor) -> Tensor:
    """Fake kernel of gated_residual: like `x` including its strides (`torch.empty_like`),
    which the fake-rule language, whose outputs are contiguous, cannot say."""
    torch._check(torch.broadcast_shapes(x.shape, gate.shape) == x.shape,
                 lambda: f"exops::gated_residual: gate {tuple(gate.shape)} does not broadcast to "
                         f"x {tuple(x.shape)}")
    return torch.empty_like(x, dtype=torch.result_type(x, gate))


def gated_residual_vmap(info, in_dims, x: Tensor, gate: Tensor):
    """Batching rule of gated_residual: batch dims to the front; an unbatched `gate` broadcasts
    as it is, a batched one gets singleton dims so that it still broadcasts against x's dims."""
    x_dim, gate_dim = in_dims
    x = x.movedim(x_dim, 0) if x_dim is not None else x.expand(info.batch_size, *x.shape)
    if gate_dim is not None:
        gate = gate.movedim(gate_dim, 0)
        gate = gate.reshape(gate.shape[0], *([1] * (x.dim() - gate.dim())), *gate.shape[1:])
    return torch.ops.exops.gated_residual.default(x, gate), 0
