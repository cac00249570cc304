"""Checks of an op library driven by the `samples:` of its op files.

Each op's samples become real calls, and each call goes through the checks a PyTorch op must
pass to work everywhere:

    from runtime import testing
    for case in testing.load_cases(["schemas"]):
        testing.check_opcheck(case)     # torch.library.opcheck, all four utilities
        testing.check_gradients(case)   # gradcheck (+ gradgradcheck) in float64, ops with derivatives
        testing.check_compile(case)     # torch.compile(fullgraph=True, dynamic=True), 3 sizes
        testing.check_export(case)      # torch.export, save, load, run
        testing.check_vmap(case)        # ops with a batching rule: vmap == a loop
        testing.check_autocast(case)    # ops with an autocast policy: inputs cast

Every check raises AssertionError (or the error PyTorch raised) on failure and returns what it ran
on success, so the same functions serve a pytest suite (tests/test_samples.py parametrizes them
over every sample of the example library) or a user's own script over their library.

Sample inputs are deterministic: random contents come from a generator seeded with the case's id.
"""

from __future__ import annotations

import io
import types
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch

from codegen.model import (
    BaseTy,
    BaseType,
    ListType,
    Op,
    Sample,
    TensorSample,
    Type,
    strip_optional,
)

ALL_OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor",
                     "test_aot_dispatch_dynamic")

# Sizes the compile check runs at: every tensor dim >= 2 and every SymInt >= 2 of a sample is
# multiplied by each factor (a SymInt in a schema is a size: it scales with the shapes).
COMPILE_SCALES = (1, 2, 3)

_ENUMS = {
    "strided": torch.strided, "sparse_coo": torch.sparse_coo, "jagged": torch.jagged,
    "contiguous_format": torch.contiguous_format, "preserve_format": torch.preserve_format,
    "channels_last": torch.channels_last, "channels_last_3d": torch.channels_last_3d,
}


@dataclass(frozen=True)
class Case:
    """One sample of one op."""

    op: Op
    sample: Sample
    index: int

    @property
    def id(self) -> str:
        label = self.sample.name if self.sample.name is not None else str(self.index)
        return f"{self.op.name}[{label}]"

    @property
    def overload(self) -> torch._ops.OpOverload:
        n = self.op.name
        return getattr(getattr(getattr(torch.ops, self.op.namespace), n.name),
                       n.overload_or_default)

    def inputs(self, **options: Any) -> tuple[tuple, dict]:
        """Fresh (args, kwargs) for this sample; see `make_inputs` for the options."""
        return make_inputs(self.op, self.sample, seed=_seed(self.id), **options)


def load_cases(paths: Iterable[str]) -> list[Case]:
    """Every sample of every op in the op files (or directories) `paths`."""
    from codegen.load import load_library

    lib = load_library(list(paths))
    return [Case(op, s, i) for op in lib.ops for i, s in enumerate(op.samples)]


@dataclass
class PythonLibrary:
    """An op library loaded without building anything (see `load_python_library`)."""

    ops: list[Op]
    modules: dict[str, types.ModuleType]           # namespace -> its registrations module
    libraries: list[torch.library.Library] = field(default_factory=list)

    def cases(self) -> list[Case]:
        return [Case(op, s, i) for op in self.ops for i, s in enumerate(op.samples)]

    def close(self) -> None:
        """Remove every definition and registration (the namespaces can be loaded again)."""
        for m in self.modules.values():
            m._lib._destroy()
        for lib in self.libraries:
            lib._destroy()
        self.libraries.clear()


def load_python_library(paths: Iterable[str]) -> PythonLibrary:
    """Define the ops of op files whose kernels are all Python, in this process, and run their
    generated registrations from memory: a library to try or test before any C++ exists.

    Each namespace is defined with `torch.library.Library(ns, "DEF")` (so it must not be loaded
    already; a namespace torch defines gets a "FRAGMENT") and gets the module `runtime._reg_<ns>`
    would be, from the same generator.
    """
    from codegen.dest.py_reg import generate_registrations, module_name
    from codegen.load import load_library
    from codegen.model import OperatorName
    from codegen.torch_namespaces import is_torch_namespace

    lib = load_library(list(paths))
    diags = lib.diagnostics()
    texts = generate_registrations(lib, diags)
    diags.raise_if_errors()
    out = PythonLibrary(list(lib.ops), {})
    try:
        for ns in lib.namespaces:
            defs = torch.library.Library(ns, "FRAGMENT" if is_torch_namespace(ns) else "DEF")
            out.libraries.append(defs)
            for op in lib.ops:
                if op.namespace == ns:
                    n = op.name
                    schema = op.schema.with_name(OperatorName(None, n.name, n.overload))
                    defs.define(str(schema), tags=tuple(getattr(torch.Tag, t) for t in op.tags))
            text = texts[f"generated/runtime/_reg_{ns}.py"]
            module = types.ModuleType(module_name(ns))
            exec(compile(text, f"<generated {module_name(ns)}>", "exec"), module.__dict__)
            out.modules[ns] = module
    except BaseException:
        out.close()
        raise
    return out


def _seed(text: str) -> int:
    return zlib.crc32(text.encode())


# --------------------------------------------------------------------------------------------------
# Samples -> values


def make_tensor(t: TensorSample, *, generator: torch.Generator, dtype: torch.dtype | None = None,
                scale: int = 1, device: str | torch.device = "cpu",
                requires_grad: bool | None = None) -> torch.Tensor:
    """A tensor for a sample: given values, or random ones in [low, high).

    `dtype` overrides a floating sample's dtype (gradcheck runs in float64); `scale` multiplies
    each dim >= 2 of a random tensor's shape.
    """
    target = getattr(torch, t.dtype)
    if dtype is not None and target.is_floating_point:
        target = dtype
    if t.values is not None:
        x = torch.tensor(t.values, dtype=target)
    else:
        shape = [d * scale if d >= 2 else d for d in t.shape]
        if target == torch.bool:
            x = torch.randint(0, 2, shape, generator=generator).bool()
        elif target.is_floating_point or target.is_complex:
            low = -1.0 if t.low is None else t.low
            high = 1.0 if t.high is None else t.high
            x = torch.rand(shape, generator=generator, dtype=torch.float64) * (high - low) + low
            x = x.to(target)
        else:
            low = 0 if t.low is None else int(t.low)
            high = 10 if t.high is None else int(t.high)
            x = torch.randint(low, high, shape, generator=generator, dtype=target)
    x = x.to(device)
    grad = t.requires_grad if requires_grad is None else requires_grad
    if grad and (x.is_floating_point() or x.is_complex()):
        x.requires_grad_(True)
    return x


def make_value(value: Any, t: Type, *, generator: torch.Generator, dtype: torch.dtype | None,
               scale: int, device: str | torch.device, requires_grad: bool | None) -> Any:
    """A sample value of an argument of schema type `t` -> what the op is called with."""
    if value is None:
        return None
    base = strip_optional(t)
    if isinstance(base, ListType):
        return [make_value(v, base.elem, generator=generator, dtype=dtype, scale=scale,
                           device=device, requires_grad=requires_grad) for v in value]
    if isinstance(value, TensorSample):
        return make_tensor(value, generator=generator, dtype=dtype, scale=scale, device=device,
                           requires_grad=requires_grad)
    if isinstance(base, BaseType):
        name = base.name
        if name is BaseTy.ScalarType:
            return getattr(torch, value)
        if name is BaseTy.Device:
            return torch.device(value)
        if name in (BaseTy.Layout, BaseTy.MemoryFormat):
            return _ENUMS[value]
        if name is BaseTy.SymInt and isinstance(value, int) and value >= 2:
            return value * scale
    return value


def make_inputs(op: Op, sample: Sample, *, seed: int = 0, dtype: torch.dtype | None = None,
                scale: int = 1, device: str | torch.device = "cpu",
                requires_grad: bool | None = None) -> tuple[tuple, dict]:
    """(args, kwargs) calling `op` on `sample`: positional arguments in order up to the first one
    the sample leaves out; the rest, and keyword-only ones, by name."""
    gen = torch.Generator().manual_seed(seed)
    given = dict(sample.args)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    positional = True
    for a in op.schema.arguments:
        if a.name not in given:
            positional = False
            continue
        v = make_value(given[a.name], a.type, generator=gen, dtype=dtype, scale=scale,
                       device=device, requires_grad=requires_grad)
        if positional and not a.kwarg_only:
            args.append(v)
        else:
            kwargs[a.name] = v
    return tuple(args), kwargs


def _clone(x: Any) -> Any:
    """A deep copy of call inputs (tensors keep their requires_grad, as leaves)."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _detach(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, (list, tuple)):
        return type(x)(_detach(v) for v in x)
    return x


def _assert_same(actual: Any, expected: Any, what: str) -> None:
    try:
        torch.testing.assert_close(_detach(actual), _detach(expected), equal_nan=True)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


# --------------------------------------------------------------------------------------------------
# What an op supports


def differentiable_inputs(op: Op) -> list[str]:
    """Inputs with a derivative formula (empty without `derivatives:`)."""
    from codegen.formulas import Derivatives

    d = op.derivatives
    if not isinstance(d, Derivatives):
        return []
    return [n for f in d.formulas for n in f.inputs]


def has_gradients(case: Case) -> bool:
    """Whether `check_gradients` has something to check: a floating (or complex) tensor given
    for an input with a derivative formula."""
    diff = set(differentiable_inputs(case.op))

    def floating(v: Any) -> bool:
        if isinstance(v, TensorSample):
            dt = getattr(torch, v.dtype)
            return dt.is_floating_point or dt.is_complex
        return isinstance(v, tuple) and any(floating(x) for x in v)

    return any(name in diff and floating(v) for name, v in case.sample.args)


def is_mutating(op: Op) -> bool:
    return bool(op.schema.mutable_arguments)


def has_dynamic_output(op: Op) -> bool:
    """Whether an output's size depends on data (a `dynamic()` in its fake rule, or the tag)."""
    from codegen.shape import FakeRule

    if "dynamic_output_shape" in op.tags:
        return True
    return isinstance(op.fake, FakeRule) and op.fake.uses_dynamic


# --------------------------------------------------------------------------------------------------
# The checks


def check_opcheck(case: Case, test_utils: Iterable[str] = ALL_OPCHECK_UTILS) -> dict[str, str]:
    """`torch.library.opcheck` on the sample. Inputs with derivative formulas require grad (so
    the autograd registration is exercised); others as the sample says."""
    diff = set(differentiable_inputs(case.op))
    args, kwargs = case.inputs()
    if diff:
        args, kwargs = _require_grad(case.op, args, kwargs, diff)
    return torch.library.opcheck(case.overload, args, kwargs, test_utils=tuple(test_utils))


def _require_grad(op: Op, args: tuple, kwargs: dict, names: set[str]) -> tuple[tuple, dict]:
    def mark(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
            return x.detach().requires_grad_(True)
        if isinstance(x, list):
            return [mark(v) for v in x]
        return x

    positional = [a for a in op.schema.arguments if not a.kwarg_only]
    new_args = tuple(mark(v) if positional[i].name in names else v for i, v in enumerate(args))
    new_kwargs = {k: (mark(v) if k in names else v) for k, v in kwargs.items()}
    return new_args, new_kwargs


def _flat_tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat_tensors(v)]
    return []


def check_gradients(case: Case, *, second_order: bool | None = None) -> bool:
    """gradcheck of the op's derivatives on the sample in float64; then, when the formulas are
    differentiable (`second_order`, by default: every library op they call has derivatives),
    gradgradcheck, and otherwise that a second backward raises an error naming the op.

    Returns False when the sample has no floating input with a formula (nothing to check)."""
    op = case.op
    diff = set(differentiable_inputs(op))
    if not diff:
        return False
    args, kwargs = case.inputs(dtype=torch.float64)
    args, kwargs = _require_grad(op, args, kwargs, diff)
    leaves = [t for t in _flat_tensors((args, kwargs)) if t.requires_grad]
    if not leaves:
        return False
    overload = case.overload

    def rebuild(*flat: torch.Tensor) -> tuple[tuple, dict]:
        it = iter(flat)

        def put(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.requires_grad:
                return next(it)
            if isinstance(x, list):
                return [put(v) for v in x]
            return x
        return tuple(put(a) for a in args), {k: put(v) for k, v in kwargs.items()}

    def fn(*flat: torch.Tensor) -> Any:
        a, k = rebuild(*flat)
        return overload(*a, **k)

    torch.autograd.gradcheck(fn, tuple(leaves))
    if second_order is None:
        second_order = not _first_order_only(op)
    if second_order:
        torch.autograd.gradgradcheck(fn, tuple(leaves))
    else:
        _check_second_order_error(fn, leaves, op)
    return True


def _first_order_only(op: Op) -> bool:
    from codegen.formulas import Derivatives, library_calls

    d = op.derivatives
    if not isinstance(d, Derivatives):
        return False
    calls = library_calls(d)
    return bool(calls) and any(not _op_differentiable(ref) for ref in calls)


def _op_differentiable(ref: Any) -> bool:
    """Whether a library op a formula calls has autograd (derivatives or a composite kernel)."""
    ns = getattr(torch.ops, ref.namespace)
    packet = getattr(ns, ref.name)
    overload = getattr(packet, ref.overload or "default")
    return overload.has_kernel_for_dispatch_key(torch._C.DispatchKey.Autograd) or \
        overload.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd)


def _check_second_order_error(fn: Any, leaves: list[torch.Tensor], op: Op) -> None:
    out = fn(*leaves)
    outs = [t for t in _flat_tensors(out) if t.requires_grad]
    grads = torch.autograd.grad(outs, leaves, [torch.ones_like(t) for t in outs],
                                create_graph=True, allow_unused=True)
    total = torch.stack([g.sum() for g in grads if g is not None]).sum()
    try:
        torch.autograd.grad(total, leaves, allow_unused=True)
    except RuntimeError as e:
        if str(op.name) not in str(e):
            raise AssertionError(f"second backward of {op.name} failed without naming the op: "
                                 f"{e}") from e
        return
    raise AssertionError(f"{op.name}: a second backward through formulas calling ops without "
                         "derivatives should raise, but it ran")


def check_vmap(case: Case, *, batch: int = 3) -> int:
    """`torch.vmap` of the op (its batching rule) equals calling it on each batch element:
    every Tensor argument batched at dim 0, then only the first one batched at its last dim.
    Returns the number of configurations checked."""
    op = case.op
    overload = case.overload
    samples = [make_inputs(op, case.sample, seed=_seed(case.id) + i) for i in range(batch)]
    args0, kwargs = samples[0]
    tensor_at = [i for i, a in enumerate(args0) if isinstance(a, torch.Tensor)]
    assert tensor_at, f"{case.id}: the sample passes no positional Tensor to batch"
    configs = [{i: 0 for i in tensor_at}, {tensor_at[0]: -1}]
    for dims in configs:
        def element(b: int) -> list:
            return [samples[b][0][i] if i in dims else args0[i] for i in range(len(args0))]
        batched = [torch.stack([element(b)[i] for b in range(batch)], dim=dims[i])
                   if i in dims else args0[i] for i in range(len(args0))]
        in_dims = tuple(dims.get(i) for i in range(len(args0)))
        actual = torch.vmap(lambda *a: overload(*a, **kwargs), in_dims=in_dims)(*batched)
        each = [overload(*element(b), **kwargs) for b in range(batch)]
        expected: Any = (tuple(torch.stack([e[k] for e in each]) for k in range(len(each[0])))
                         if isinstance(each[0], tuple) else torch.stack(each))
        _assert_same(actual, expected, f"{case.id} under vmap, in_dims={in_dims}")
    return len(configs)


def check_autocast(case: Case) -> torch.dtype:
    """Under `torch.autocast` of the op's device type, floating Tensor inputs are cast to the
    policy's dtype before the op runs: its floating outputs have that dtype. Returns it."""
    spec = case.op.autocast
    assert spec is not None, f"{case.id}: the op declares no autocast policy"
    target = getattr(torch, spec.cast_inputs)
    # Inputs of another floating dtype than the policy's, so that the cast shows.
    given = torch.float32 if target != torch.float32 else torch.bfloat16
    args, kwargs = case.inputs(dtype=given, device=spec.device_type)
    with torch.autocast(spec.device_type, dtype=torch.bfloat16):
        out = case.overload(*_detach(args), **_detach(kwargs))
    floating = [t for t in _flat_tensors(out) if t.is_floating_point()]
    assert floating, f"{case.id}: no floating output to check the cast on"
    assert all(t.dtype == target for t in floating), \
        f"{case.id}: under autocast, outputs are {[t.dtype for t in floating]}, expected {target}"
    return target


def check_compile(case: Case, *, backend: str = "aot_eager",
                  scales: Iterable[int] = COMPILE_SCALES) -> int:
    """`torch.compile(fullgraph=True, dynamic=True)` of a call of the op at several input sizes:
    no graph break, one compilation for all sizes, results equal to eager. Returns the number of
    sizes run."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    overload = case.overload

    def call(*args: Any, **kwargs: Any) -> Any:
        return overload(*args, **kwargs)

    torch._dynamo.reset()
    graphs_before = counters["stats"]["unique_graphs"]
    compiled = torch.compile(call, backend=backend, fullgraph=True, dynamic=True)
    n = 0
    config = {"capture_dynamic_output_shape_ops": has_dynamic_output(case.op),
              "error_on_recompile": True}
    with torch._dynamo.config.patch(config):
        for scale in scales:
            args, kwargs = case.inputs(scale=scale)
            expected = overload(*_clone(args), **_clone(kwargs))
            actual = compiled(*args, **kwargs)
            _assert_same(actual, expected, f"{case.id} compiled at scale {scale}")
            n += 1
    graphs = counters["stats"]["unique_graphs"] - graphs_before
    assert graphs == 1, f"{case.id}: compiled {graphs} graphs for {n} sizes"
    return n


def check_export(case: Case) -> None:
    """`torch.export.export` of a module calling the op, saved and loaded back, gives eager's
    results. Tensors (and Tensor lists) are the program's inputs; other arguments are constants."""
    overload = case.overload
    args, kwargs = case.inputs()
    tensor_positions = [i for i, a in enumerate(args) if _is_tensor_arg(a)]
    tensor_keys = [k for k, v in kwargs.items() if _is_tensor_arg(v)]

    class Call(torch.nn.Module):
        def forward(self, *tensors: Any) -> Any:
            it = iter(tensors)
            a = [next(it) if i in tensor_positions else v for i, v in enumerate(args)]
            k = {key: (next(it) if key in tensor_keys else v) for key, v in kwargs.items()}
            return overload(*a, **k)

    def tensors_of(a: tuple, k: dict) -> tuple:
        return tuple(_detach(a[i]) for i in tensor_positions) + \
            tuple(_detach(k[key]) for key in tensor_keys)

    program = torch.export.export(Call(), tensors_of(args, kwargs))
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    buffer.seek(0)
    loaded = torch.export.load(buffer)
    fresh_args, fresh_kwargs = case.inputs()
    expected = overload(*_clone(_detach(fresh_args)), **_clone(_detach(fresh_kwargs)))
    actual = loaded.module()(*tensors_of(fresh_args, fresh_kwargs))
    _assert_same(actual, expected, f"{case.id} after export, save and load")


def _is_tensor_arg(v: Any) -> bool:
    return isinstance(v, torch.Tensor) or (
        isinstance(v, list) and bool(v) and all(isinstance(t, torch.Tensor) for t in v))

