"""Op library IR -> the C++ of a namespace built on torch's stable ABI (Note [ABI choice] in
codegen/abi.py), in the same files as the full API's (Note [Shards] in cpp_library):

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
the fake tensor), or is the schema's own (every return a mutated argument: in-place and out=
ops return the argument). These call back into torch's dispatcher, so FakeTensor keeps symbolic
sizes symbolic. Rules that compute sizes (`empty`, `broadcast`, arithmetic on sizes) stay
Python fakes: the stable Tensor gives sizes only as int64_t, which would specialize a dynamic
shape. A Python fake on a C++ op needs `m.set_python_module`, which the stable ABI has from
torch 2.13 on, so with an older `min_torch` every op's fake must be C++ (checked at `check`).
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen import abi as abi_mod
from codegen import reserved
from codegen import shape as S
from codegen.abi import Abi
from codegen.api import cpp, cpp_stable
from codegen.dest import cpp_library as L
from codegen.dest import cpp_register
from codegen.dest.cpp_kernels import KernelDecl, group_by_namespace
from codegen.diagnostics import Diagnostics
from codegen.gen import banner
from codegen.tags import shape_tag
from codegen.model import BaseTy, BaseType, DispatchKey, ListType, Op, OpLibrary, OptionalType


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
    from codegen.dest.py_reg import fake_of

    for op in lib.ops:
        if not is_stable(op):
            continue
        a: Abi = op.abi  # type: ignore[assignment]
        signature(op, diags)
        # The `inplace`/`out` tag the schema's shape implies restates the schema: before 2.12 it
        # is left out of the registration; any other tag is refused.
        if set(op.tags) - {shape_tag(op.schema)} and not a.has("tags"):
            need = abi_mod.version_text(abi_mod.STABLE_FEATURES["tags"])
            diags.error(op.loc, f"{op.name} has tags, which torch's stable ABI registers from "
                        f"torch {need} on, but this namespace's min_torch is {a.min_text}",
                        f'set min_torch: "{need}", or remove the tags')
        if not a.has("set_python_module") and fake_of(op) is not None \
                and not isinstance(cached_signature(op), cpp.Unsupported) \
                and translate_meta(op) is None:
            need = abi_mod.version_text(abi_mod.STABLE_FEATURES["set_python_module"])
            loc = getattr(op.fake, "loc", None) or op.loc
            diags.error(loc, f"the fake kernel of {op.name} stays in Python (only like(), "
                        "reduce() and in-place/out= fakes become stable C++ Meta kernels), and "
                        f"torch's stable ABI can name its Python module only from torch {need} "
                        f"on, but this namespace's min_torch is {a.min_text}",
                        f'set min_torch: "{need}", or write the rule with like() or reduce()')


# --------------------------------------------------------------------------------------------------
# Meta kernels (Note [Stable Meta kernels])


class _NoCpp(Exception):
    pass


@dataclass(frozen=True)
class StableMeta:
    op: str                     # `name.overload`
    schema: str
    rule: str
    function: str
    decl: str
    body: str


@L.per_object
def translate_meta(op: Op) -> StableMeta | None:
    keys = {k for k, _ in op.dispatch}
    if not keys or keys & {DispatchKey.Meta, DispatchKey.CompositeImplicitAutograd}:
        return None
    sig = cached_signature(op)
    if isinstance(sig, cpp.Unsupported):
        return None
    rule = op.fake if isinstance(op.fake, S.FakeRule) else (
        S.schema_fake(op.schema) if op.fake is None else None)
    if rule is None:
        return None
    try:
        return _MetaEmitter(op, sig).kernel(rule)
    except _NoCpp:
        return None


class _MetaEmitter:
    def __init__(self, op: Op, sig: cpp.CppSignature):
        self.op = op
        self.sig = sig
        self.args = {b.argument.name: b for b in sig.arguments}
        self.used: set[str] = set()

    def kernel(self, rule: S.FakeRule) -> StableMeta:
        if rule.bindings or rule.uses_dynamic or not self.op.schema.returns:
            raise _NoCpp()
        mutated = S.mutated_returns(self.op.schema)
        if all(isinstance(m, str) for m in mutated):
            # In-place and out=: the fake result is the argument itself.
            outs = [self.name(m) for m in mutated]  # type: ignore[arg-type]
        elif any(isinstance(m, str) for m in mutated) or len(rule.outputs) != len(mutated):
            raise _NoCpp()
        else:
            for r in self.op.schema.returns:
                if r.type != BaseType(BaseTy.Tensor):
                    raise _NoCpp()
            outs = [self.tensor(o) for o in rule.outputs]
        body = f"return {outs[0]};" if len(outs) == 1 else f"return {{{', '.join(outs)}}};"
        params = ", ".join(f"{b.type.cpp()} {b.name}" if b.argument.name in self.used
                           else f"{b.type.cpp()} /*{b.name}*/" for b in self.sig.arguments)
        fn = reserved.cpp_identifier("meta_" + L.impl_name(self.op).replace(".", "_"))
        return StableMeta(L.impl_name(self.op), str(self.op.schema), rule.text or "(schema)", fn,
                          f"{self.sig.returns.cpp()} {fn}({params})", body)

    def name(self, arg: str) -> str:
        self.used.add(arg)
        return self.args[arg].name

    def tensor(self, e: S.Expr) -> str:
        match e:
            case S.Like(tensor=S.Arg() as t, dtype=dt, device=None) if t.ty == S.TENSOR:
                out = f"torch::stable::empty_like(torch::stable::contiguous({self.name(t.name)}))"
                return out if dt is None else f"torch::stable::to({out}, {self.dtype(dt)})"
            case S.Reduce(tensor=S.Arg() as t, dims=dims, keepdim=k, dtype=dt) \
                    if t.ty == S.TENSOR:
                x = self.name(t.name)
                dtype = f"{x}.scalar_type()" if dt is None else self.dtype(dt)
                return f"torch::stable::sum({x}, {self.dims(dims)}, {self.cond(k)}, {dtype})"
        raise _NoCpp()

    def dtype(self, e: S.Expr) -> str:
        match e:
            case S.NoneLit():
                return "std::nullopt"
            case S.DtypeLit(name=n):
                from codegen.dest.cpp_meta import SCALAR_TYPES
                return f"torch::headeronly::ScalarType::{SCALAR_TYPES[n]}"
            case S.Arg(name=n) if strip(self.args[n].argument.type) == BaseType(BaseTy.ScalarType):
                return self.name(n)
        raise _NoCpp()

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
        raise _NoCpp()

    def cond(self, e: S.Expr) -> str:
        match e:
            case S.BoolLit(value=v):
                return "true" if v else "false"
            case S.Arg(name=n) if self.args[n].argument.type == BaseType(BaseTy.bool):
                return self.name(n)
        raise _NoCpp()


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


def meta_kernels(shard: L.Shard) -> list[StableMeta]:
    out, used = [], set()
    for op in shard.ops:
        k = translate_meta(op)
        if k is None:
            continue
        fn, n = k.function, 2
        while fn in used:
            fn, n = f"{k.function}_{n}", n + 1
        used.add(fn)
        if fn != k.function:
            k = StableMeta(k.op, k.schema, k.rule, fn,
                           k.decl.replace(f" {k.function}(", f" {fn}(", 1), k.body)
        out.append(k)
    return out


def def_entries(shard: L.Shard, diags: Diagnostics) -> list[dict]:
    out = []
    for op in shard.ops:
        if signature(op, diags) is None:
            continue
        tags = [f"at::Tag::{t}" for t in op.tags] if op.abi.has("tags") else []
        out.append({"schema": L.def_schema(op), "tags": tags})
    return out


def generate(lib: OpLibrary, diags: Diagnostics) -> dict[str, str]:
    out = {}
    for ns, shs in L.shards(lib).items():
        a = abi_mod.namespace_abi(lib, ns)
        if a is None:
            continue
        for shard in shs:
            sigs = [s for op in shard.ops
                    if not isinstance(s := cached_signature(op), cpp.Unsupported)]
            text = " ".join(s.pointer_type() for s in sigs)
            out[shard.header] = L.render(
                "cpp_stable_kernels.h.j2",
                banner=banner("//", [shard.file.path]),
                ns=ns,
                min_torch=a.min_text,
                source=shard.file.path,
                generator="torch::stable::Generator" in text,
                groups=group_by_namespace(kernel_decls(shard, diags)),
            )
            out[shard.registration] = L.render(
                "cpp_stable_register.cpp.j2",
                **cpp_register.shard_context(shard),
                min_torch=a.min_text,
                python_module=L.python_module(ns) if a.has("set_python_module") else None,
                defs=def_entries(shard, diags),
                blocks=impl_blocks(shard, diags),
                meta=meta_kernels(shard),
            )
    return out
