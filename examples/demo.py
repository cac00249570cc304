"""Calls the ops of the example libraries `exops` and `exstable` (schemas/*.yaml): eagerly,
under autograd, under `torch.compile` and through `torch.export`.

Run with `make demo` (generates, builds, then runs this). Each op is reachable two ways:
`runtime.ops.<name>` and `torch.ops.exops.<op>`; both are the same OpOverload.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the repository root

import runtime  # noqa: E402
from runtime import ops  # noqa: E402

torch.manual_seed(0)


def show(title, value):
    print(f"{title}:\n{value}\n")


x = torch.randn(2, 3)
show("scaled_add(x, [1, 2, 3], alpha=10)", ops.scaled_add(x, torch.tensor([1.0, 2.0, 3.0]), alpha=10))
show("weighted_mse(x, 0, weight=[1, 0, 2], reduction='none')",
     ops.weighted_mse(x, torch.zeros(3), torch.tensor([1.0, 0.0, 2.0]), "none"))
show("soft_shrink(x, 0.5)", ops.soft_shrink(x, 0.5))
y = x.clone()
ops.soft_shrink_(y, 0.5)
show("soft_shrink_(y, 0.5) (in place)", y)
out = torch.empty(0)
show("soft_shrink.out(x, out=out)", ops.soft_shrink_out(x, 0.5, out=out))
mean, var = ops.moments(torch.arange(12.0).reshape(3, 4), [1])
show("moments(arange(12).reshape(3, 4), dim=[1]) -> (mean, var)", (mean, var))
show("weighted_sum([ones(3), arange(3)], [2, -1])",
     ops.weighted_sum([torch.ones(3), torch.arange(3.0)], [2.0, -1.0]))
show("pad_end(ones(2, 2), [1, 2], value=-1)", ops.pad_end(torch.ones(2, 2), [1, 2], -1.0))
show("select_above([0.1, -3, 2, 0.5], 1.0)", ops.select_above(torch.tensor([0.1, -3.0, 2.0, 0.5]), 1.0))
show("gaussian_window(5, 1.0, dtype=float64)", ops.gaussian_window(5, 1.0, dtype=torch.float64))
show("smooth_clamp(linspace(-4, 4, 5), limit=2)", ops.smooth_clamp(torch.linspace(-4, 4, 5), 2.0))
show("smooth_clamp_backward(ones(5), linspace(-4, 4, 5), 2)",
     ops.smooth_clamp_backward(torch.ones(5), torch.linspace(-4, 4, 5), 2.0))
show("scaled_smooth_clamp(x, scale=[1, 2, 4])", ops.scaled_smooth_clamp(x, torch.tensor([1.0, 2.0, 4.0])))

assert ops.scaled_add is torch.ops.exops.scaled_add.default

# Every op of every op file, on the first sample its op file gives.
from runtime import testing  # noqa: E402


def describe(value):
    if isinstance(value, torch.Tensor):
        return f"Tensor{list(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(describe(v) for v in value) + ")"
    return repr(value)


print("every op on its first sample:")
seen = set()
for case in testing.load_cases([str(Path(__file__).resolve().parent.parent / "schemas")]):
    if str(case.op.name) in seen:
        continue
    seen.add(str(case.op.name))
    args, kwargs = case.inputs()
    print(f"  {str(case.op.name):<32} -> {describe(case.overload(*args, **kwargs))}")
print(f"\nnamespaces loaded: {runtime.NAMESPACES}; {len(ops.__all__)} ops in runtime.ops")


# Under autograd: gradients come from the derivative formulas in the op file.
x = torch.randn(4, 3, requires_grad=True)
scale = torch.rand(3, requires_grad=True)
ops.scaled_smooth_clamp(ops.scaled_add(x, x, alpha=0.5), scale, 1.5).sum().backward()
show("autograd: d/dx and d/dscale of scaled_smooth_clamp(scaled_add(x, x, alpha=0.5), scale)",
     (x.grad, scale.grad))


# Under torch.compile (fake kernels come from the fake rules): one graph, no breaks, and
# dynamic shapes without recompiling for a new size.
def model(a, b):
    h = ops.scaled_add(a, b, alpha=2.0)
    h = ops.smooth_clamp(h, 1.0)
    mean, var = ops.moments(h, [1])
    return mean + var


compiled = torch.compile(model, fullgraph=True, dynamic=True)
for n in (4, 7):
    a, b = torch.randn(n, 5), torch.randn(5)
    torch.testing.assert_close(compiled(a, b), model(a, b))
show("torch.compile(fullgraph=True, dynamic=True) matches eager at sizes 4 and 7", True)


# Through torch.export: the ops stay ops of the graph.
class Model(torch.nn.Module):
    def forward(self, a, b):
        return model(a, b)


exported = torch.export.export(Model(), (torch.randn(4, 5), torch.randn(5)))
calls = sorted({str(n.target) for n in exported.graph.nodes if n.op == "call_function"})
show("torch.export graph calls", calls)
a, b = torch.randn(4, 5), torch.randn(5)
torch.testing.assert_close(exported.module()(a, b), model(a, b))


# The stable-ABI namespace exstable (schemas/stable.yaml, docs/STABLE_ABI.md): one binary for
# every torch >= 2.10; eagerly, under autograd and torch.compile with its C++ Meta kernels.
x = torch.randn(3, 4, requires_grad=True)
y = ops.scale(x, 2.5)
y.sum().backward()
torch.testing.assert_close(y, x * 2.5)
torch.testing.assert_close(x.grad, torch.full_like(x, 2.5))
show("exstable::scale (stable ABI) and its gradient", True)
stable_model = torch.compile(lambda t: ops.masked_sum(ops.scale(t, 3.0), [1]), fullgraph=True,
                             dynamic=True)
for n in (4, 7):
    t = torch.randn(n, 5)
    torch.testing.assert_close(stable_model(t), (t * 3.0).sum(1))
show("exstable ops under torch.compile(dynamic=True) at sizes 4 and 7", True)
