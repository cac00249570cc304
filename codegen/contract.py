"""What an op promises its callers, derived from the IR: the facts the compatibility snapshot
records (codegen.compat) and the op reference shows (codegen.dest.md_reference).

Everything here reads the IR only (no torch import, no generator), so `bc-check` and `docs` stay
as fast as loading the op files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from codegen import formulas as F
from codegen.formulas import Derivatives, constant_reads, library_calls
from codegen.model import (DispatchKey, ExportLoss, Op, OpLibrary, PyRef, holds_dict,
                           holds_str_or_device, is_tensor_like, unexported_return,
                           untraceable_return)
from codegen.shape import fake_of
from codegen.tags import VIEW, through_functional_among, unfunctionalizable

DEVICES = ("CPU", "CUDA", "Meta")

# Tags whose removal changes what torch.compile, export or CUDA graphs assume about an op, and so
# can change results or break a compiled program that worked: tag -> what happens without it.
COMPILE_TAGS: dict[str, str] = {
    "nondeterministic_seeded": "torch.compile may deduplicate or reorder its calls as if they "
                               "were deterministic",
    "dynamic_output_shape": "torch.compile assumes its output sizes follow from input sizes",
    "data_dependent_output": "torch.compile assumes its output does not depend on input data",
    "needs_fixed_stride_order": "inductor may pass inputs in another stride order",
    "needs_exact_strides": "inductor may pass inputs with other strides",
    "needs_contiguous_strides": "inductor may pass non-contiguous inputs",
    "cudagraph_unsafe": "CUDA graphs may capture it",
    "inplace_view": "torch.compile no longer treats it as a view that mutates metadata",
    "maybe_aliasing_or_mutating": "torch.compile assumes it neither aliases nor mutates",
    "pt2_compliant_tag": "torch.compile no longer treats it as PT2-compliant",
    "inplace": "torch.compile no longer auto-functionalizes it",
    "out": "torch.compile no longer auto-functionalizes it",
}


def _is_not_implemented(e) -> bool:
    return isinstance(e, F.Call) and isinstance(e.func, F.BuiltinRef) and \
        e.func.name == "not_implemented"


def implemented_inputs(formula) -> list[str]:
    """The inputs a formula gives gradients for: not `not_implemented(...)` (nor `None` in a
    tuple formula)."""
    e = formula.expr
    if len(formula.inputs) > 1 and isinstance(e, F.TupleLit) and len(e.items) == len(formula.inputs):
        return [n for n, item in zip(formula.inputs, e.items)
                if not _is_not_implemented(item) and item != F.Const(None)]
    return [] if _is_not_implemented(e) else list(formula.inputs)


def differentiable_inputs(op: Op, library: Iterable[Op] | OpLibrary = ()) -> list[str]:
    """Inputs with gradients: a formula that is not `not_implemented(...)`, or every Tensor input
    of a CompositeImplicitAutograd op (differentiated through its decomposition), or, for an
    in-place op of `library` that differentiates through its functional variant
    (`tags.through_functional`), those of the variant. The sample checks (codegen.testing)
    differentiate exactly these."""
    d = op.derivatives
    if isinstance(d, Derivatives):
        return [n for f in d.formulas for n in implemented_inputs(f)]
    if op.kernel(DispatchKey.CompositeImplicitAutograd) is not None:
        return [a.name for a in op.schema.arguments if is_tensor_like(a.type)]
    functional = differentiated_through(op, library)
    if functional is None:
        return []
    # The variant takes the op's arguments in order (tags.functional_among).
    mine = {theirs.name: a.name for a, theirs in zip(op.schema.arguments,
                                                       functional.schema.arguments)}
    return [mine[n] for n in differentiable_inputs(functional)]


def differentiated_through(op: Op, library: Iterable[Op] | OpLibrary) -> Op | None:
    """The functional variant an in-place op of `library` differentiates through; None for an
    out= op (its Autograd kernel refuses gradients, as aten's do) and an op without one."""
    overloads = library.named(op.namespace, op.name.base) if isinstance(library, OpLibrary) \
        else library
    through = through_functional_among(op, overloads)
    return through[1] if through is not None and through[0] != "out" else None


def has_autograd(op: Op, library: Iterable[Op] | OpLibrary = ()) -> bool:
    return bool(differentiable_inputs(op, library))


def double_backward(op: Op, lib: OpLibrary) -> bool | None:
    """None without gradients; else whether the backward is itself differentiable: every op of the
    library its formulas call has gradients (torch's own functions do), or gives indices only
    (formulas.indices_only). An in-place op's is its functional variant's."""
    if not has_autograd(op, lib):
        return None
    if not has_autograd(op):    # its gradients are its functional variant's
        return double_backward(differentiated_through(op, lib), lib)
    d = op.derivatives
    if not isinstance(d, Derivatives):
        return True     # a decomposition into differentiable ops
    if constant_reads(lib, op):
        return False
    for ref in library_calls(d):
        callees = [o for o in lib.named(ref.namespace, ref.name)
                   if ref.overload is None or o.name.overload == ref.overload]
        if not callees or not any(has_autograd(c, lib) or F.indices_only(c) for c in callees):
            return False
    return True


def devices(op: Op) -> tuple[str, ...]:
    """The devices the op runs on: a kernel for the device, or a composite one (any device);
    `Meta` (fake tensors: torch.compile, export) from a Meta kernel, a fake rule or a
    decomposition."""
    keys = {k for k, _ in op.dispatch}
    composite = bool(keys & {DispatchKey.CompositeExplicitAutograd,
                             DispatchKey.CompositeImplicitAutograd})
    out = [d for d in ("CPU", "CUDA") if composite or DispatchKey(d) in keys]
    if fake_kind(op) is not None:
        out.append("Meta")
    return tuple(out)


def fake_kind(op: Op) -> str | None:
    """How fake tensors (torch.compile, export) get the op's outputs: `rule` (a shape rule),
    `python` (a function), `Meta kernel`, `decomposition`, `composite kernel`, `schema` (an
    in-place, out= or `-> ()` op's outputs follow from its schema; codegen.dest.py_fake), or
    None."""
    if isinstance(op.fake, PyRef):
        return "python"
    if op.fake is not None:
        return "rule"
    if op.kernel(DispatchKey.Meta) is not None:
        return "Meta kernel"
    if op.kernel(DispatchKey.CompositeImplicitAutograd) is not None:
        return "decomposition"
    if op.kernel(DispatchKey.CompositeExplicitAutograd) is not None:
        return "composite kernel"
    if fake_of(op) is not None:
        return "schema"
    return None


def untraceable(op: Op) -> bool:
    """Whether the op has kernels but nothing that runs on fake tensors (its no-fake warning)."""
    return bool(op.dispatch) and fake_kind(op) is None


def vmap_rule(op: Op) -> str | None:
    """`pointwise`, `leading`, `leading(x, y)`, `python`, `decomposition` or None."""
    v = op.vmap
    if v is None:
        return "decomposition" if op.kernel(DispatchKey.CompositeImplicitAutograd) else None
    if isinstance(v.kind, PyRef):
        return "python"
    return f"leading({', '.join(v.rows)})" if v.rows else str(v.kind)


def autocast_rule(op: Op) -> str | None:
    """`<device type>:<dtype>` (inputs cast under autocast on that device), or None."""
    a = op.autocast
    return f"{a.device_type}:{a.cast_inputs}" if a is not None else None


def torch_refuses(op: Op, check: str, library: Iterable[Op] = ()) -> str | None:
    """Why torch cannot pass `check` (`compile`, `export`) on the op whatever its kernels, as a
    warning of the op says, or None: torch.compile puts no call returning a lone non-Tensor or a
    Dict in a graph, a program torch.export makes of a call loses some returns
    (`model.unexported_return`: a Dict, a str, a Device, a list other than Tensor[], a nested
    tuple, a bool among several), and neither
    takes an op it cannot functionalize (tags.unfunctionalizable) but the export of a view, whose
    program is not decomposed. The sample checks skip the check (codegen.sample_failures), the
    op reference marks it ✗ (`traces`). `library`: ops of its library, where a functional variant
    would be."""
    if check == "compile" and untraceable_return(op.schema.returns) is not None:
        return (f"torch.compile cannot put a call of {op.name} in a graph (its "
                "non-tensor-return warning)")
    lost = unexported_return(op.schema.returns) if check == "export" else None
    if lost is not None:
        ret, loss = lost
        warning = "(its non-tensor-return warning)"
        if any(holds_dict(r.type) for r in op.schema.returns):
            # Exported, the program does not save: torch serializes no custom op's Dict output.
            return (f"torch.export cannot save a program calling {op.name}, which returns a "
                    f"Dict {warning}")
        if loss is ExportLoss.TRACE:
            return (f"torch.export cannot trace a call of {op.name}, which returns a str or a "
                    f"Device among several values {warning}")
        if loss is ExportLoss.SAVE and holds_str_or_device(ret.type):
            # Traced, its value is the fake kernel's, and the program does not save or load.
            return (f"torch.export cannot save a program calling {op.name}, which returns a str "
                    f"or a Device {warning}")
        if loss is ExportLoss.SAVE:
            return (f"torch.export cannot save a program calling {op.name}, which returns "
                    f"'{ret.type}' {warning}")
        return (f"torch.export cannot load a program calling {op.name}, which returns a "
                f"bool among several values {warning}")
    if check in ("compile", "export") and untraceable(op):
        return f"torch.{check} cannot trace {op.name}, which has no fake kernel (its no-fake warning)"
    if check in ("compile", "export"):
        kind = unfunctionalizable(op, library)
        # check_export decomposes (functionalizes) the program of a mutating op only.
        if kind is not None and (check == "compile" or kind != VIEW):
            return (f"torch.{check} cannot functionalize {op.name} (its not-functionalizable "
                    "warning)")
    return None


def unfunctionalizable_in_backward(op: Op, lib: OpLibrary) -> tuple[F.OpRef, Op] | None:
    """The first call in the formulas of `op` of a library op torch cannot functionalize
    (tags.unfunctionalizable; mamba's `selective_scan_bwd(..., Tensor!? dz_, ...) -> Tensor[]`),
    with that op; None when there is none. AOTAutograd functionalizes the backward it traces,
    so torch.compile cannot differentiate `op`, nor opcheck's test_aot_dispatch_* run it;
    eager autograd can."""
    if op.derivatives is None:
        return None
    for ref in library_calls(op.derivatives):
        callee = F.resolve(lib, ref)
        if callee is not None and unfunctionalizable(callee, lib.ops) is not None:
            return ref, callee
    return None


def traces(op: Op, lib: OpLibrary, check: str) -> bool:
    """Whether `check` (`compile`: torch.compile, `export`: torch.export) takes a call of the op:
    fake tensors run it (`devices`), and torch does not refuse it (`torch_refuses`), so the
    sample checks run it."""
    return "Meta" in devices(op) and \
        torch_refuses(op, check, lib.named(op.namespace, op.name.base)) is None


@dataclass(frozen=True)
class Contract:
    """One op's contract, as the snapshot records it (codegen.compat)."""

    schema: str
    file: str
    tags: tuple[str, ...]
    kernels: tuple[str, ...]        # dispatch keys with a kernel
    devices: tuple[str, ...]
    fake: str | None
    differentiable: tuple[str, ...]
    double_backward: bool | None
    vmap: str | None
    autocast: str | None
    api: str | None = None          # its name in the package's `ops` module; None: not recorded

    FIELDS = ("schema", "file", "tags", "kernels", "devices", "fake", "differentiable",
              "double_backward", "vmap", "autocast", "api")


def contract(op: Op, lib: OpLibrary, api: str | None = None) -> Contract:
    """`api`: the op's Python API name (Note [API names] in codegen/dest/py_ops.py, above this
    module), which its caller allocates across the library."""
    return Contract(
        schema=str(op.schema), file=op.path, tags=tuple(sorted(op.tags)),
        kernels=tuple(sorted(k.value for k, _ in op.dispatch)), devices=devices(op),
        fake=fake_kind(op), differentiable=tuple(differentiable_inputs(op, lib)),
        double_backward=double_backward(op, lib), vmap=vmap_rule(op),
        autocast=autocast_rule(op), api=api)
