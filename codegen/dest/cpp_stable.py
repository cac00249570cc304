"""Op library IR -> the C++ of a namespace built on torch's stable ABI (Note [ABI choice] in
codegen/abi.py), in the same files as the full API's (Note [Shards] in codegen/layout.py):

- `generated/cpp/<ns>/<shard>.h`: every C++ kernel declared with the types `TORCH_BOX` unboxes
  (codegen.api.cpp_stable), including only torch/csrc/stable and torch/headeronly headers.
  Kernel sources are compiled with -Werror=missing-declarations as on the full API, so a kernel
  defined with another signature fails to compile and `python -m codegen.build` names its op.
  There is no `<ns>::ops::` call API: the stable ABI has no typed dispatcher handle.
- `generated/cpp/<ns>/register_<shard>.cpp`: `STABLE_TORCH_LIBRARY` (or `_FRAGMENT`) with every
  schema (tags from torch 2.12, `set_python_module` from 2.13), one `STABLE_TORCH_LIBRARY_IMPL`
  block per dispatch key, each kernel boxed by `TORCH_BOX` through a function pointer of the
  declared type, and Meta kernels from fake rules that the stable op set covers (below).

Note [Stable Meta kernels]
A fake rule becomes a C++ Meta kernel when it is made of `like(t, dtype=)` (an `empty_like` of
the contiguous `t`, then `to(dtype)`), `reduce(t, dims, keepdim, dtype=)` (torch::stable::sum on
the fake tensor), `a if cond else b` over them (a C++ conditional), with dtypes from literals,
`ScalarType` arguments, `t.dtype`, `x or y` and `promote_types(...)` (aten::promote_types
through the dispatcher: the stable headers have no promotion table), or is the schema's own (every return a mutated argument, or none: in-place
and out= ops return the argument, `-> ()` ops nothing). These call back into torch's
dispatcher, so FakeTensor keeps symbolic sizes symbolic. The rule's `check(...)`s come first,
when their conditions are fixed at trace time without reading a size: dtypes (`scalar_type()`),
`t.dim()`, `len(list)`, `t.element_size()` (a Tensor argument's itemsize: the stable headers have
no element size of a ScalarType, so `dtype.itemsize` keeps the fake in Python),
`bool`/`int`/`str`/`ScalarType` arguments and literals, `//` and `%` on them with Python's
semantics (`meta_floordiv`, `meta_mod`: floored, by zero a std::runtime_error naming the op and
the expression) and bindings of such ints (const `int64_t` locals, named as on the full ABI,
each evaluated even when unread, as the Python fake evaluates it); each check throws
the `std::runtime_error` STD_TORCH_CHECK throws, with the message the full ABI's TORCH_CHECK and
a Python fake's torch._check give. Rules that compute sizes (`empty`, `broadcast`, arithmetic
on sizes) or check them stay Python fakes: the stable Tensor gives sizes only as int64_t, which
would specialize a dynamic shape; so do device checks (FakeTensor shows every tensor on `meta`
while a Meta kernel runs). A Python fake on a C++ op needs `m.set_python_module`, which the
stable ABI has from torch 2.13 on, so with an older `min_torch` every op's fake must be C++
(checked at `check`, naming and pointing at the check or the part of the rule that keeps it in
Python).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from codegen import abi as abi_mod
from codegen import reserved
from codegen import shape as S
from codegen.abi import Abi
from codegen.api import cpp, cpp_stable
from codegen.config import Project
from codegen import layout as L
from codegen.dest import cpp_register
from codegen.dest.cpp_kernels import KernelDecl, group_by_namespace
from codegen.diagnostics import Diagnostics
from codegen.rendering import banner, render
from codegen.tags import implied_tags, registered_tags
from codegen.model import (BaseTy, BaseType, DispatchKey, ListType, Op, OpLibrary, OptionalType,
                           PyRef, is_base)
from codegen.dest.cpp_meta import SCALAR_TYPES, where


def is_stable(op: Op) -> bool:
    return op.abi is not None


def stable_namespaces(lib: OpLibrary) -> dict[str, Abi]:
    out = {}
    for ns in lib.namespaces:
        a = abi_mod.namespace_abi(lib, ns)
        if a is not None:
            out[ns] = a
    return out


@L.per_object
def cached_signature(op: Op) -> cpp.CppSignature | cpp.Unsupported:
    try:
        return cpp_stable.signature(op.schema, op.abi)
    except cpp.Unsupported as e:
        return e.with_traceback(None)


def signature(op: Op, diags: Diagnostics) -> cpp.CppSignature | None:
    sig = cached_signature(op)
    if isinstance(sig, cpp.Unsupported):
        diags.error(L.locate(op, sig.span), f"{sig.message} (in op {op.name})", sig.hint)
        return None
    return sig


def bound_kernels(shard: L.Shard, diags: Diagnostics) -> list[L.BoundKernel]:
    return L.bound_kernels(shard, diags, signature)


# --------------------------------------------------------------------------------------------------
# `check`: what the stable ABI cannot do at the namespace's min_torch


def check(lib: OpLibrary, diags: Diagnostics) -> None:
    """Located errors for every op of a stable namespace that its min_torch cannot register:
    arguments and returns TORCH_BOX cannot box, tags before 2.12, Python fakes before 2.13."""
    for op in lib.ops:
        if not is_stable(op):
            continue
        a: Abi = op.abi  # type: ignore[assignment]
        if needs_binding(op):
            signature(op, diags)
        # The tags opgen implies (the `inplace`/`out` of the schema's shape, the
        # `needs_contiguous_strides` of a rule's outputs) are left out of the registration
        # before 2.12; any other tag is refused.
        refused_tags = [t for t in op.tags if t not in implied_tags(op)]
        if refused_tags and not a.has("tags"):
            need = abi_mod.version_text(abi_mod.STABLE_FEATURES["tags"])
            # At the first tag the op file writes; `func:` only for an op built without one.
            loc = next((l for t, l in op.tag_locs if t in refused_tags), op.loc)
            named = ", ".join(f"'{t}'" for t in refused_tags)
            diags.error(loc, f"{op.name} has tag{'s' if len(refused_tags) > 1 else ''} {named}, "
                        f"which torch's stable ABI registers from torch {need} on, but this "
                        f"namespace's min_torch is {a.min_text}",
                        f'set min_torch: "{need}", or remove the tag'
                        f"{'s' if len(refused_tags) > 1 else ''}")
        if not a.has("set_python_module") and S.fake_of(op) is not None \
                and not isinstance(cached_signature(op), cpp.Unsupported) \
                and translate_meta(op) is None:
            need = abi_mod.version_text(abi_mod.STABLE_FEATURES["set_python_module"])
            rule = op.fake if isinstance(op.fake, S.FakeRule) else None
            loc = (rule.located.loc if rule is not None and rule.located is not None
                   else getattr(op.fake, "loc", None) or op.loc)
            refused = refused_check(op)
            why_not = _translate(op)
            if refused is not None:
                # The check stays: the whole fake stays Python rather than drop it.
                why = f"its check({refused.check.text}) {refused.reason}"  # type: ignore[union-attr]
                if rule is not None:
                    loc = rule.loc_of(refused.check.cond) or loc  # type: ignore[union-attr]
                hint = (f'set min_torch: "{need}", or leave the check to the kernel (remove it '
                        "from the rule)")
            elif rule is not None and isinstance(why_not, _NoCpp) and why_not.reason:
                # Name and point at the part of the rule that keeps it Python.
                if why_not.node is not None:
                    loc = rule.loc_of(why_not.node) or loc
                    why = f"`{_written(rule, why_not.node)}` {why_not.reason}"
                    hint = (f'set min_torch: "{need}", or write that part with what a stable '
                            "Meta kernel has: like(), reduce(), conditions fixed at trace time, "
                            "promote_types()")
                else:
                    why = why_not.reason
                    hint = f'set min_torch: "{need}", or write the rule without it'

            else:
                why = ("only rules and the fakes of in-place, out= and `-> ()` ops become stable "
                       "C++ Meta kernels")
                hint = f'set min_torch: "{need}", or write the fake as a rule with like() or reduce()'
            diags.error(loc, f"the fake kernel of {op.name} stays in Python: {why}; torch's "
                        f"stable ABI can name a Python module only from torch {need} on, but "
                        f"this namespace's min_torch is {a.min_text}", hint)


def _written(rule: S.FakeRule, node: S.Expr) -> str:
    """The text of `node` as the rule writes it."""
    span = rule.span_of(node)
    return type(node).__name__ if span is None else rule.text[span.start:span.end]


# --------------------------------------------------------------------------------------------------
# Meta kernels (Note [Stable Meta kernels])


class _NoCpp(Exception):
    """The rule needs what a stable Meta kernel cannot do; `check` is the precondition that
    needs it, when one does (check() names it)."""

    def __init__(self, reason: str = "", check: S.Check | None = None,
                 node: S.Expr | None = None):
        super().__init__(reason)
        self.reason = reason
        self.check = check
        self.node = node            # the part of the rule refused, when one is


@dataclass(frozen=True)
class StableMeta:
    op: str                     # `name.overload`
    schema: str
    rule: str
    function: str
    decl: str
    body: tuple[str, ...]       # lines
    helpers: frozenset[str] = frozenset()


@L.per_object
def _translate(op: Op) -> StableMeta | _NoCpp:
    keys = {k for k, _ in op.dispatch}
    if not keys or keys & {DispatchKey.Meta, DispatchKey.CompositeImplicitAutograd}:
        return _NoCpp("the op has a kernel that runs on fake tensors")
    sig = cached_signature(op)
    if isinstance(sig, cpp.Unsupported):
        return _NoCpp("the signature")
    rule = op.fake if isinstance(op.fake, S.FakeRule) else (
        S.schema_fake(op.schema) if op.fake is None else None)
    if rule is None:
        return _NoCpp("a Python fake function")
    try:
        return _MetaEmitter(op, sig).kernel(rule)
    except _NoCpp as e:
        return e.with_traceback(None)


def translate_meta(op: Op) -> StableMeta | None:
    k = _translate(op)
    return None if isinstance(k, _NoCpp) else k


def refused_check(op: Op) -> _NoCpp | None:
    """Why the op's fake stays Python when a check(...) of its rule is the reason."""
    k = _translate(op)
    return k if isinstance(k, _NoCpp) and k.check is not None else None


class _MetaEmitter:
    def __init__(self, op: Op, sig: cpp.CppSignature):
        self.op = op
        self.sig = sig
        self.args = {b.argument.name: b for b in sig.arguments}
        self.used: set[str] = set()
        self.helpers: set[str] = set()
        self.rule: S.FakeRule | None = None
        self.locals: dict[str, str] = {}    # binding -> its C++ local

    def kernel(self, rule: S.FakeRule) -> StableMeta:
        self.rule = rule
        if rule.bindings and rule.uses_dynamic:
            raise _NoCpp("a binding (`name = ...;`) has no stable C++ Meta kernel translation")
        if rule.uses_dynamic:
            # In an output or, without bindings, a check's condition.
            raise _NoCpp("needs torch.library.get_ctx(), which only a Python fake has",
                         node=next(
                             n for n in S.walk(*rule.outputs, *(c.cond for c in rule.checks))
                             if isinstance(n, S.Dynamic)))
        checks: list[str] = []
        # Bindings of ints fixed at trace time are const locals (as on the full ABI,
        # codegen.dest.cpp_meta), every one evaluated as the Python fake evaluates it.
        taken = {b.name for b in self.sig.arguments} | {f"meta_{h}" for h in HELPERS} | {
            "std", "torch"}
        read = {n.name for n in rule.nodes() if isinstance(n, S.Local)}
        for step in rule.steps():
            if isinstance(step, S.Check):
                try:
                    checks += self.check(step)
                except _NoCpp as e:
                    raise _NoCpp(e.reason, step) from None
                continue
            try:
                value = self.static(step.value)
            except _NoCpp:
                raise _NoCpp("a binding (`name = ...;`) has no stable C++ Meta kernel "
                             "translation") from None
            name = reserved.fresh(reserved.cpp_identifier(step.name), taken)
            taken.add(name)
            self.locals[step.name] = name
            checks.append(("" if step.name in read else "[[maybe_unused]] ")
                          + f"const int64_t {name} = {value};")
        mutated = S.mutated_returns(self.op.schema)
        if all(isinstance(m, str) for m in mutated):
            if any(not is_base(r.type, BaseTy.Tensor) for r in self.op.schema.returns):
                raise _NoCpp("a mutated return that is not a Tensor")
            if any(isinstance(o, S.ReturnArg) and o.otherwise is not None for o in rule.outputs):
                raise _NoCpp("a returned optional argument is a new tensor when it is None")
            # In-place and out= ops return the argument itself; `-> ()` returns nothing. An out=
            # argument keeps its shape: resizing it needs its new sizes as SymInts, which the
            # stable ABI does not have (aten::resize_as_ would read them as int64_t and
            # specialize a dynamic shape).
            outs = [self.name(m) for m in mutated]  # type: ignore[arg-type]
        elif any(isinstance(m, str) for m in mutated) or len(rule.outputs) != len(mutated):
            raise _NoCpp("new and mutated returns")
        else:
            for r in self.op.schema.returns:
                if r.type != BaseType(BaseTy.Tensor):
                    raise _NoCpp("a return that is not a Tensor")
            outs = [self.tensor(o) for o in rule.outputs]
        if not outs:
            ret: tuple[str, ...] = ()
        elif len(outs) == 1:
            ret = (f"return {outs[0]};",)
        else:
            ret = (f"return {{{', '.join(outs)}}};",)
        params = ", ".join(f"{b.type.cpp()} {b.name}" if b.argument.name in self.used
                           else f"{b.type.cpp()} /*{b.name}*/" for b in self.sig.arguments)
        fn = reserved.cpp_identifier("meta_" + L.impl_name(self.op).replace(".", "_"))
        return StableMeta(L.impl_name(self.op), str(self.op.schema),
                          rule.text or "(schema)", fn,
                          f"{self.sig.returns.cpp()} {fn}({params})", (*checks, *ret),
                          frozenset(self.helpers))

    def name(self, arg: str) -> str:
        self.used.add(arg)
        return self.args[arg].name

    def check(self, c: S.Check) -> list[str]:
        """`check(cond, msg)`: thrown as the std::runtime_error STD_TORCH_CHECK throws, without
        the function, file and line STD_TORCH_CHECK puts before the message, so the error reads
        as on the full ABI (TORCH_CHECK) and in a Python fake (torch._check)."""
        return [f"if (!({self.cond(c.cond)})) {{",
                f"  throw std::runtime_error({cpp.string_literal(c.message)});",
                "}"]

    def tensor(self, e: S.Expr) -> str:
        match e:
            case S.Arg(name=n) if e.ty == S.TENSOR:
                return self.name(n)
            case S.Given(arg=S.Arg(name=n)) if e.ty == S.TENSOR:
                return f"(*{self.name(n)})"     # a condition around it tested has_value()
            case S.Like(tensor=t, dtype=dt, device=None):
                out = f"torch::stable::empty_like(torch::stable::contiguous({self.tensor(t)}))"
                return out if dt is None else f"torch::stable::to({out}, {self.dtype(dt)})"
            case S.Reduce(tensor=S.Arg() as t, dims=dims, keepdim=k, dtype=dt) \
                    if t.ty == S.TENSOR:
                x = self.name(t.name)
                dtype = f"{x}.scalar_type()" if dt is None else self.dtype(dt)
                return f"torch::stable::sum({x}, {self.dims(dims)}, {self.cond(k)}, {dtype})"
            case S.Cond(cond=c, then=a, orelse=b):
                # Fixed when the op is traced: one branch runs, as in the Python fake.
                return f"({self.cond(c)} ? {self.tensor(a)} : {self.tensor(b)})"
            case S.Like(device=d) if d is not None:
                raise _NoCpp("places its output on a device, which a Meta kernel cannot: "
                             "FakeTensor puts a Meta kernel's outputs on the inputs' device", node=e)
            case S.Empty() | S.Broadcast():
                raise _NoCpp(_COMPUTES_SIZES, node=e)
        raise _NoCpp("has no stable C++ Meta kernel translation", node=e)

    def dtype(self, e: S.Expr) -> str:
        match e:
            case S.NoneLit():
                return "std::nullopt"
            case S.DtypeLit(name=n):
                return f"torch::headeronly::ScalarType::{SCALAR_TYPES[n]}"
            case S.Arg(name=n) if strip(self.args[n].argument.type) == BaseType(BaseTy.ScalarType):
                return self.name(n)
            case S.TensorProp(tensor=S.Arg() as t, prop=S.Prop.dtype) if t.ty == S.TENSOR:
                return f"{self.name(t.name)}.scalar_type()"
            case S.Fallback(value=S.Arg() as v, default=d) if v.ty.optional:
                return f"{self.name(v.name)}.value_or({self.dtype(d)})"
            case S.PromoteTypes(items=items):
                # aten::promote_types through the dispatcher: the headers have no promotion
                # table of their own, and torch's is the one the Python fake uses.
                self.helpers.add("promote_types")
                text = self.dtype(items[0])
                for item in items[1:]:
                    text = f"meta_promote_types({text}, {self.dtype(item)})"
                return text
        raise _NoCpp("has no stable C++ Meta kernel translation", node=e)

    def dims(self, e: S.Expr) -> str:
        match e:
            case S.NoneLit():
                return "std::nullopt"
            case S.ListLit(items=items) if all(isinstance(i, S.IntLit) for i in items):
                return "std::vector<int64_t>{" + ", ".join(str(i.value) for i in items) + "}"
            case S.IntLit(value=v):
                return f"std::vector<int64_t>{{{v}}}"
            case S.Arg(name=n):
                t = self.args[n].argument.type
                if t == BaseType(BaseTy.int):
                    return f"std::vector<int64_t>{{{self.name(n)}}}"
                if isinstance(strip(t), ListType) and strip(t).elem == BaseType(BaseTy.int):
                    return self.name(n)
        raise _NoCpp("has no stable C++ Meta kernel translation", node=e)

    def cond(self, e: S.Expr) -> str:
        """A bool fixed when the op is traced (the conditions of `if` and check())."""
        match e:
            case S.BoolLit(value=v):
                return "true" if v else "false"
            case S.Arg(name=n) if self.args[n].argument.type == BaseType(BaseTy.bool):
                return self.name(n)
            case S.Given(arg=S.Arg(name=n)) \
                    if self.args[n].argument.type == OptionalType(BaseType(BaseTy.bool)):
                return f"(*{self.name(n)})"
            case S.Item(seq=seq, index=i) if e.ty == S.Ty(S.T.BOOL):
                return self.bool_item(seq, i)
            case S.Not(operand=o):
                return f"!({self.cond(o)})"
            case S.BoolOp(op=op, left=a, right=b):
                return f"({self.cond(a)} {'&&' if op == 'and' else '||'} {self.cond(b)})"
            case S.Compare(op=S.CompareOp.is_ | S.CompareOp.is_not as op, left=S.Arg() as a,
                           right=S.NoneLit()):
                return ("!" if op is S.CompareOp.is_ else "") + f"{self.name(a.name)}.has_value()"
            case S.Compare(left=a) if a.ty.base is S.T.DEVICE:
                # FakeTensor shows every tensor on `meta` while a Meta kernel runs.
                raise _NoCpp("compares devices, which a Meta kernel sees only as `meta`", node=e)
            case S.Compare(left=a, right=b) if S.T.INT_LIST in (a.ty.base, b.ty.base):
                raise _NoCpp(_SIZES, node=e)
            case S.Compare(op=S.CompareOp.eq | S.CompareOp.ne as op, left=a, right=b) \
                    if a.ty.base is S.T.DTYPE:
                return f"{self.dtype(a)} {op.value} {self.dtype(b)}"
            case S.Compare(op=op, left=a, right=b) if S.T.SCALAR in (a.ty.base, b.ty.base):
                return f"{self.number(a)} {op.value} {self.number(b)}"
            case S.Compare(op=op, left=a, right=b) if a.ty.base is S.T.INT:
                return f"{self.static(a)} {op.value} {self.static(b)}"
            case S.Compare(op=S.CompareOp.eq | S.CompareOp.ne as op, left=a, right=b):
                return f"{self.value(a)} {op.value} {self.value(b)}"
        raise _NoCpp("has no stable C++ Meta kernel translation", node=e)

    def number(self, e: S.Expr) -> str:
        """A side of a comparison of a `float` argument with a number (shape.float_value)."""
        match e:
            case S.FloatLit(value=v) if math.isfinite(v):
                return f"double{{{float(v)!r}}}"
            case S.IntLit(value=v):
                return f"int64_t{{{v}}}"
            case S.Arg(name=n) if strip(self.args[n].argument.type) == BaseType(BaseTy.float):
                return self.name(n)
        raise _NoCpp("has no stable C++ Meta kernel translation", node=e)

    def value(self, e: S.Expr) -> str:
        """A side of `==` between str or bool arguments and literals."""
        match e:
            case S.StrLit(value=v):
                return cpp.string_literal(v)
            case S.BoolLit(value=v):
                return "true" if v else "false"
            case S.Arg(name=n) if strip(self.args[n].argument.type) in (
                    BaseType(BaseTy.str), BaseType(BaseTy.bool)):
                return self.name(n)
            case S.Given(arg=S.Arg(name=n)) if strip(self.args[n].argument.type) in (
                    BaseType(BaseTy.str), BaseType(BaseTy.bool)):
                return f"(*{self.name(n)})"
            case S.Item(seq=seq, index=i) if e.ty == S.Ty(S.T.BOOL):
                return self.bool_item(seq, i)
        raise _NoCpp("has no stable C++ Meta kernel translation", node=e)

    def bool_item(self, seq: S.Expr, index: S.Expr) -> str:
        """`flags[i]` of a `bool[]` argument (a `std::vector<bool>`), indexed as Python does."""
        self.helpers.add("bool_at")
        name = self.name(seq.name) if isinstance(seq, S.Arg) else f"(*{self.name(seq.arg.name)})"
        return f"meta_bool_at({name}, {self.static(index)})"

    def static(self, e: S.Expr) -> str:
        """An int64_t fixed when the op is traced: literals, int arguments, `t.dim()`,
        `len(...)` and arithmetic on them. Sizes are not: the stable ABI reads them as int64_t,
        which would specialize a dynamic shape."""
        match e:
            case S.IntLit(value=v):
                return str(v) if -2 ** 31 < v < 2 ** 31 else f"int64_t{{{v}}}"
            case S.Arg(name=n) if self.args[n].argument.type == BaseType(BaseTy.int):
                return self.name(n)
            case S.Given(arg=S.Arg(name=n)) \
                    if self.args[n].argument.type == OptionalType(BaseType(BaseTy.int)):
                return f"(*{self.name(n)})"
            case S.TensorProp(tensor=S.Arg() as t, prop=S.Prop.ndim) if t.ty == S.TENSOR:
                return f"{self.name(t.name)}.dim()"
            case S.Len(seq=S.Arg() as a) if not a.ty.optional:
                return f"static_cast<int64_t>({self.name(a.name)}.size())"
            case S.ItemSize(dtype=S.TensorProp(tensor=S.Arg() as t)) if t.ty == S.TENSOR:
                return f"static_cast<int64_t>({self.name(t.name)}.element_size())"
            case S.ItemSize():
                # torch/headeronly has no elementSize(ScalarType); only a Tensor tells its own.
                raise _NoCpp("takes the byte size of a dtype, which torch's stable ABI gives only "
                             "of a Tensor argument (`t.element_size()`)", node=e)
            case S.Local(name=n) if n in self.locals:
                return self.locals[n]
            case S.Arith(op=S.ArithOp.add | S.ArithOp.sub | S.ArithOp.mul as op, left=a, right=b):
                return f"({self.static(a)} {op.value} {self.static(b)})"
            case S.Arith(op=S.ArithOp.floordiv | S.ArithOp.mod as op, left=a, right=b):
                # Python's floor division and modulo, by zero an error (meta_floordiv).
                self.helpers.add(op.name)
                return (f"meta_{op.name}({self.static(a)}, {self.static(b)}, "
                        f"{where(self.op, self.rule, e)})")
            case S.Neg(operand=o):
                return f"(-{self.static(o)})"
            case S.TensorSize() | S.TensorProp(prop=S.Prop.numel | S.Prop.shape) | S.Item():
                raise _NoCpp(_SIZES, node=e)
        raise _NoCpp("has no stable C++ Meta kernel translation", node=e)


_SIZES = ("compares sizes, which a stable Meta kernel can read only as int64_t, specializing "
          "dynamic shapes")
_COMPUTES_SIZES = ("computes sizes, which a stable Meta kernel can read only as int64_t, "
                   "specializing dynamic shapes")


def strip(t):
    return t.elem if isinstance(t, OptionalType) else t


# --------------------------------------------------------------------------------------------------
# Files


def kernel_decls(shard: L.Shard, diags: Diagnostics) -> list[KernelDecl]:
    decls: dict[tuple[str, str], KernelDecl] = {}
    for b in bound_kernels(shard, diags):
        comment = f"{b.key.value} kernel of {b.op.name}"  # no line: an edit elsewhere rebuilds nothing
        ident = (f"{b.cpp_namespace}::{b.fn}", b.sig.pointer_type())
        prev = decls.get(ident)
        decls[ident] = (KernelDecl(prev.cpp_namespace, prev.name, prev.decl,
                                   prev.comments + (comment,), prev.schema) if prev else
                        KernelDecl(b.cpp_namespace, b.fn, b.sig.decl(b.fn), (comment,),
                                   str(b.op.schema)))
    return list(decls.values())


def impl_blocks(shard: L.Shard, diags: Diagnostics) -> list[dict]:
    return cpp_register.group_impls(bound_kernels(shard, diags), stable=True)


def registrations(shard: L.Shard, diags: Diagnostics) -> list[tuple[str, str]]:
    """(op name, dispatch key) of every kernel a stable shard's unit registers."""
    return cpp_register.registered(impl_blocks(shard, diags), meta_kernels(shard))


# C++ helpers of stable Meta kernels (cpp_stable_register.cpp.j2): no kernel takes their names.
HELPERS = ("promote_types", "floordiv", "mod", "bool_at")


def meta_kernels(shard: L.Shard) -> list[StableMeta]:
    out, used = [], {f"meta_{h}" for h in HELPERS}
    for op in shard.ops:
        k = translate_meta(op)
        if k is None:
            continue
        fn, n = k.function, 2
        while fn in used:
            fn, n = f"{k.function}_{n}", n + 1
        used.add(fn)
        if fn != k.function:
            k = dataclasses.replace(k, function=fn,
                                    decl=k.decl.replace(f" {k.function}(", f" {fn}(", 1))
        out.append(k)
    return out


def needs_binding(op: Op) -> bool:
    """Whether the op's types must pass TORCH_BOX: any but an op whose kernels are all Python,
    which is defined by its schema string alone (torch takes it whatever the types)."""
    return not op.dispatch or not all(isinstance(k, PyRef) for _, k in op.dispatch)


def defined(shard: L.Shard, diags: Diagnostics) -> list:
    """The ops a shard's registration unit defines (`m.def`): those with a C++ binding, and
    those with Python kernels only."""
    return [op for op in shard.ops if not needs_binding(op) or signature(op, diags) is not None]


def def_entries(shard: L.Shard, diags: Diagnostics) -> list[dict]:
    out = []
    for op in defined(shard, diags):
        tags = [f"at::Tag::{t}" for t in registered_tags(op)]
        out.append({"schema": L.def_schema(op), "tags": tags})
    return out


def generate(lib: OpLibrary, diags: Diagnostics, project: Project) -> dict[str, str]:
    out = {}
    for ns, shs in L.shards(lib).items():
        a = abi_mod.namespace_abi(lib, ns)
        if a is None:
            continue
        for shard in shs:
            sigs = [s for op in shard.ops
                    if not isinstance(s := cached_signature(op), cpp.Unsupported)]
            text = " ".join(s.pointer_type() for s in sigs)
            out[shard.header(project)] = render(
                "cpp_stable_kernels.h.j2",
                banner=banner("//", [shard.file.path]),
                ns=ns,
                min_torch=a.min_text,
                source=shard.file.path,
                generator="torch::stable::Generator" in text,
                groups=group_by_namespace(kernel_decls(shard, diags)),
            )
            out[shard.registration(project)] = render(
                "cpp_stable_register.cpp.j2",
                **cpp_register.shard_context(shard),
                min_torch=a.min_text,
                python_module=L.python_module(project, ns) if a.has("set_python_module") else None,
                defs=def_entries(shard, diags),
                blocks=impl_blocks(shard, diags),
                meta=(meta := meta_kernels(shard)),
                meta_throws=any("throw " in line for k in meta for line in k.body) or any(
                    {"floordiv", "mod", "bool_at"} & k.helpers for k in meta),
                meta_helpers=sorted(set().union(*(k.helpers for k in meta))),
            )
    return out
