"""Python kernels of the sample-check test library (tests/samplelib/ops.yaml, namespace `smp`),
and deliberately wrong variants that tests/test_sample_checks.py swaps in to see each check fail.
"""

from __future__ import annotations

import torch


def rms_norm(x, weight, eps=1e-06):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotary(x, cos, sin, head_size):
    if x.size(-1) != head_size:
        raise RuntimeError(f"rotary: x's last dim is {x.size(-1)}, head_size is {head_size}")
    half = head_size // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)


def segment_max(values, ids, num_segments):
    out = values.new_full((num_segments, *values.shape[1:]), float("-inf"))
    index = ids.view(-1, *([1] * (values.dim() - 1))).expand_as(values)
    return out.scatter_reduce(0, index, values, "amax", include_self=True)


def nonzero_rows(x):
    return (x != 0).flatten(1).any(1).nonzero().flatten()


def threshold(x, limit):
    mask = x > limit
    return x * mask, mask


def cube(x):
    return x * x * x


def cube_backward(grad_out, x):
    return 3 * x * x * grad_out


def noisy(x, p, generator=None):
    keep = torch.rand(x.shape, generator=generator, dtype=x.dtype) >= p
    return x * keep / (1 - p)


def square(x):
    return x * x


def square_backward(grad_out, x):
    return 2 * x * grad_out


def square_sum(x):
    return torch.ops.smp.square(x).sum(-1)


def twice(x):
    return x * 2


def scale_grad(grad, s):
    return grad * s


def cube_mean(x):
    return torch.ops.smp.cube(x).mean(-1)


def chunk_rows(x, chunks):
    return [c.clone() for c in x.chunk(chunks, 0)]


def chunk_rows_fake(x, chunks):
    rows = x.size(0) // chunks
    return [x.new_empty((rows, *x.shape[1:])) for _ in range(chunks)]


def tanh32(x):
    if x.dtype != torch.float32:
        raise RuntimeError(f"tanh32 takes float32 only, got {x.dtype}")
    return torch.tanh(x)


def scale_to(x, scale, out_dtype):
    return (x * scale).to(out_dtype)


def bounded(x, lo, hi):
    return x.clamp(lo, hi)


def bounded_(x, lo, hi):
    return x.clamp_(lo, hi)


def scale_all(xs, s):
    return [x * s for x in xs]


def scale_all_(xs, s):
    for x in xs:
        x.mul_(s)


def row_scale(x, weight):
    return x * weight


# -- wrong on purpose -----------------------------------------------------------------------------


def noisy_ignores_generator(x, p, generator=None):
    keep = torch.rand(x.shape, dtype=x.dtype) >= p
    return x * keep / (1 - p)


def chunk_rows_wrong_fake(x, chunks):
    return [x.new_empty((x.size(0), *x.shape[1:])) for _ in range(chunks)]


def row_scale_vmap_needs_x_batched(info, in_dims, x, weight):
    """Wrong on purpose: right while x is batched, but with x unbatched it drops the batch of
    a batched weight (uses its first element for every batch element)."""
    xd, wd = in_dims
    if xd is None:
        if wd is not None:
            weight = weight.select(wd, 0)
        return row_scale(x, weight).expand(info.batch_size, *x.shape), 0
    x = x.movedim(xd, 0)
    if wd is not None:
        weight = weight.movedim(wd, 0).unsqueeze(1)
    return row_scale(x, weight), 0


def row_scale_in_float32(x, weight):
    return (x * weight).float()


def off_by_one_on_cuda(x):
    """Wrong on purpose: a CUDA result that differs from the CPU one."""
    return x + 1 if x.is_cuda else x.clone()


def shrink(x, lambd=0.5):
    return x.sign() * (x.abs() - lambd).clamp_min(0)


def shrink_out(x, lambd=0.5, *, out):
    return out.copy_(shrink(x, lambd))


def complex_scale(z, s):
    return z * s


def accumulate(buf, x):
    buf.add_(x)


def accumulate_vmap(info, in_dims, buf, x):
    """The batch of `buf` written in place; an unbatched `x` is added to every batch element."""
    bd, xd = in_dims
    x = x if xd is None else x.movedim(xd, 0)
    buf.movedim(bd, 0).add_(x)
    return None, None


def accumulate_vmap_writes_a_copy(info, in_dims, buf, x):
    """Wrong on purpose: writes to a copy of the batch (`movedim(...).contiguous()` copies a
    batch that is not at dim 0), so `buf` at in_dims -1 is left as it was."""
    bd, xd = in_dims
    x = x if xd is None else x.movedim(xd, 0)
    buf.movedim(bd, 0).contiguous().add_(x)
    return None, None


def split_total(x, sizes):
    return [p.clone() for p in x.split(list(sizes))], x.sum(0)


def split_total_vmap(info, in_dims, x, sizes):
    x = x.movedim(in_dims[0], 0)
    parts = [p.clone() for p in x.split(list(sizes), dim=1)]
    return (parts, x.sum(1)), ([0] * len(parts), 0)


def split_total_vmap_shifts_a_part(info, in_dims, x, sizes):
    """Wrong on purpose in the list only: its first part is read one row late."""
    x = x.movedim(in_dims[0], 0)
    parts = [p.clone() for p in x.split(list(sizes), dim=1)]
    parts[0] = x.narrow(1, 1, parts[0].shape[1]).clone()
    return (parts, x.sum(1)), ([0] * len(parts), 0)


def attend(q, k, out=None):
    """`out` when given (written), else a new tensor; and a new one."""
    result, total = q * k, (q + k).sum(-1)
    if out is None:
        return result, total
    out.copy_(result)
    return out, total


def attend_vmap(info, in_dims, q, k, out=None):
    """Rows are independent: the batch is folded into them, `out` written through a view."""
    def rows(t, d):
        t = t.unsqueeze(0).expand(info.batch_size, *t.shape) if d is None else t.movedim(d, 0)
        return t.reshape(-1, t.shape[-1])

    qd, kd, od = (*in_dims, None)[:3]
    if out is None:
        result, total = attend(rows(q, qd), rows(k, kd))
        return (result.view(info.batch_size, -1, result.shape[-1]),
                total.view(info.batch_size, -1)), (0, 0)
    out = out.movedim(od, 0)
    result, total = attend(rows(q, qd), rows(k, kd))
    out.copy_(result.view(out.shape))
    return (out, total.view(info.batch_size, -1)), (0, 0)


def alias_of(x):
    return x.view(x.shape)


def named_rows(x):
    return {"rows": x * 2}


def describe(x):
    return f"{x.dim()}-dim"


def dims_of(x):
    return [x.dim(), x.dim() + 1]


def row_lengths(row_off):
    """torch-harmonics' split_csr_rows: numbers read from the data, no fake kernel."""
    lengths = (row_off[1:] - row_off[:-1]).tolist()
    longest = max(lengths)
    return sum(n > longest // 2 for n in lengths), longest, longest // 2


def with_flag(x):
    return x * 2, x.dim() == 2


def tripled(x):
    return x * 3


def tripled_bwd(grad, dx_):
    """mamba's selective_scan_bwd's form: writes the gradient into `dx_` when given, and
    returns it in a list."""
    g = grad * 3
    if dx_ is not None:
        dx_.copy_(g)
    return [g]


# -- what torch.compile and torch.export take or refuse (tests/test_reference_marks.py) ----------


def double_rows_(x, chunks):
    """Doubles `x` and returns its rows in `chunks` new tensors."""
    x.mul_(2)
    return [c.clone() for c in x.chunk(chunks)]


def double_rows_fake(x, chunks):
    return [c.clone() for c in x.chunk(chunks)]


def add_to(x, y=None):
    return x.clone() if y is None else x + y


def add_to_into(x, y=None):
    """`y` written with x + y when given, else a new tensor."""
    if y is None:
        return x.clone()
    return y.add_(x)


def add_into_second(y, x):
    return x.add_(y)


def row_count(x):
    return x.size(0)


def scale_lists(lists, s):
    """apex's amp_C scale: lists[1][i] = lists[0][i] * s."""
    for src, dst in zip(lists[0], lists[1]):
        dst.copy_(src * s)


def tied_scatter_sum(src, index, dim_size):
    # index_add needs as many indices as src has elements: the sizes are tied.
    return src.new_zeros(dim_size).index_add(0, index, src)
