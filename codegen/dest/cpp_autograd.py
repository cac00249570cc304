"""C++ Autograd kernels from derivative formulas (`codegen.formulas`), for full-ABI namespaces.

Note [C++ autograd]
Each differentiable op whose formulas C++ can express gets, in `<generated>/cpp/<ns>/autograd.cpp`
(compiled into the namespace's library), what torchgen generates for aten from derivatives.yaml:

- a `torch::autograd::Node` subclass `<Op>Backward` holding exactly what the formulas read (the
  same plan as the Python path, `formulas.saved`: SavedVariables for tensors read whole, sizes,
  dtype or device for tensors read for metadata only, owned copies of other arguments), whose
  `apply` evaluates the formulas over ATen for the inputs that need a gradient;
- an Autograd kernel that calls the op below autograd, and when grad mode is on and an input
  requires grad, records the node with `collect_next_edges` / `set_history`;
- `TORCH_LIBRARY_IMPL(<ns>, Autograd, m)` registering the kernels.

The node's `apply` runs with grad mode on when the engine is asked for `create_graph`, so a
backward built from differentiable ops is itself differentiable, as with the Python path. The
formulas are reverse-mode only: a call with a forward-mode tangent raises, naming the op.
Undefined output gradients are zeros (as autograd.Function materializes them).

Arguments keep their names (they are the op's API and its kernel's C++ parameters); the generated
names move instead. `at`, `c10`, `std` and `torch` are only ever written before `::`, where C++
looks up namespaces and types alone, so an argument of that name hides nothing. In `apply`, the
locals holding the inputs and the formulas' bindings are named apart from what it reads unqualified
(`grads`, `task_should_compute_output`, ..., `_APPLY_NAMES`) and from the node's members (`x_saved_`
beside an input `x_saved_` makes that input's local `x_saved__`). Only arguments named `opgen_*`,
the prefix of the Autograd kernel's own locals and of the helpers it calls, keep the Python path.

An op without derivatives (no `derivatives:`, no CompositeImplicitAutograd kernel) that neither
writes to nor returns views of its arguments gets torch's own Autograd kernel for aten ops,
`autogradNotImplementedFallback`, as torchgen gives an aten op without a derivatives.yaml entry
(an op with Python kernels, or in an `autograd: python` file, a Python one to the same effect):
where an input requires grad, its outputs get a node whose backward raises "derivative for <op>
is not implemented". Without it, torch's fallback for custom ops only warned at backward, and
eager and compiled code disagreed: eager differentiated through the ATen calls inside the C++
kernel, and torch.compile gave no gradient (`not_differentiable_in_cpp`). A formula may call such
an op (flash-attention's forward calling its backward op): a second backward then reaches that
kernel and raises naming the callee, as aten's double backward through `_flash_attention_backward`
does, so the calling op keeps the C++ path. A formula for several inputs may be one call of a
library op returning a Tensor for each (`q, k, v: flash_backward(...)`): the call runs once and
each input takes its element.

An op keeps the Python path (codegen.dest.py_autograd) when its file says `autograd: python`, its
namespace is on the stable ABI (which has no autograd API), its own kernels are Python, or a
formula needs what this translator does not carry (a Python-only helper, a library op with a
Python kernel, or without derivatives and that kernel, a torch function outside TORCH_FUNCTIONS,
keyword arguments those tables do not name, ...): `reason` says why, and `check` prints it as a
located note. Formulas are never translated approximately: anything not listed here is refused,
and the op keeps the Python path. An optional number argument of the op (`float? scale`) is
carried to a library op's parameter of its type only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Callable

from codegen import formulas as F
from codegen import reserved
from codegen.abi import namespace_abi
from codegen.expr import walk
from codegen.api import cpp
from codegen.config import Project
from codegen.diagnostics import Diagnostics, Loc, with_article as _a
from codegen.enums import SCALAR_TYPES, scalar_type_number
from codegen.layout import (cached_signature, check_formulas, constant_reads, first_order_only,
                            impl_name, library_calls, memo, per_object, shards)
from codegen.rendering import banner, output_dir, render
from codegen.model import (BaseTy, BaseType, DispatchKey, ListType, Op, OpLibrary, OptionalType,
                           PyRef, annotation_of, is_tensor_like, is_tensor_list_list,
                           strip_optional, without_alias)
from codegen.tags import TENSOR_LIST, shape_tag, through_functional, writes_its_list

# Value kinds of translated expressions.
T, TL, FLT, INT, BOOL, SCALAR, STR, SIZES, DTYPE, DEVICE, NONE = (
    "Tensor", "Tensor[]", "float", "int", "bool", "Scalar", "str", "sizes", "dtype", "device",
    "None")
# A symbolic size (a SymInt argument, `t.size(i)`, `t.shape[i]`, `t.numel()`) is a c10::SymInt,
# and a float computed from one a c10::SymFloat: their arithmetic stays symbolic, so that dynamic
# shapes are not specialized by the backward (comparing them guards, as in Python).
SYMINT, SYMFLOAT = "SymInt", "SymFloat"
# The kind of an optional argument of the op, `opt:float?`: passed on to a library op whose
# parameter has its type, and used nowhere else.
OPTIONAL = "opt:"
NUMBER = (FLT, INT, BOOL, SCALAR)
# Numbers Python's + - * / take (bools aside), and what meets a Tensor as a Scalar.
ARITH = (FLT, INT, SYMINT, SYMFLOAT)
SCALARS = (*NUMBER, SYMINT, SYMFLOAT)
LISTS = {"float[]": FLT, "int[]": INT}

# torch.<name>(...) -> at::<name>(...), and tensor methods, with the kinds of their arguments after
# `self` (`n`: a number, `T`: a Tensor, `TL`: a list of tensors, `s`: sizes or int[], `d`: dims,
# an int or int[], `i`: an int, `b`: a bool, `T|n`: either). `name:kind` may also be passed as
# `name=`: C++ takes it in its place, so the keywords must name exactly the parameters that follow
# the positional arguments.
_UNARY = ("abs", "neg", "exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "sinh",
          "cosh", "sigmoid", "sqrt", "rsqrt", "sign", "sgn", "reciprocal", "relu", "erf",
          "square", "conj", "logical_not", "isnan", "floor", "ceil", "round", "trunc", "atan",
          "asin", "acos", "exp2", "log2", "log10", "signbit", "isfinite", "erfc", "erfinv",
          "lgamma", "digamma", "asinh", "acosh", "atanh", "sinc", "i0", "frac")
# torch.zeros_like(x) and ones_like, also given a dtype (C++ takes it as TensorOptions).
_LIKE = ("zeros_like", "ones_like")
# Operations along one dimension, `dim` an int (C++ takes an optional dtype after it).
_ALONG_DIM = ("softmax", "log_softmax", "cumsum", "cumprod")
TORCH_FUNCTIONS: dict[str, tuple[tuple[str, ...], ...]] = {
    **{name: (("T",),) for name in _UNARY},
    **{name: (("T", "T|n"),) for name in ("mul", "add", "sub", "div", "pow", "gt", "ge", "lt",
                                          "le", "eq", "ne", "fmod", "remainder",
                                          # integer unpacking (torchao's int4 nibbles)
                                          "bitwise_left_shift", "bitwise_right_shift",
                                          "bitwise_and", "bitwise_or", "bitwise_xor")},
    # No overload of these takes a number (formulas.py refuses one at check).
    **{name: (("T", "T"),) for name in ("maximum", "minimum", "logical_and", "logical_or",
                                        "atan2")},
    "where": (("T", "T|n", "T|n"),),
    "matmul": (("T", "T"),), "mm": (("T", "T"),), "bmm": (("T", "T"),),
    "clamp": (("T", "n", "n"),),
    **{name: (("T",), ("T", "dim:d"), ("T", "dim:d", "keepdim:b")) for name in ("sum", "mean")},
    "cat": (("TL",), ("TL", "dim:i")),
    "gather": (("T", "i", "T"),),
    "chunk": (("T", "chunks:i"), ("T", "chunks:i", "dim:i")),
    "unbind": (("T",), ("T", "dim:i")),
    **{name: (("T", "dim:i"),) for name in _ALONG_DIM},
    **{name: (("T",), ("T", "dim:d"), ("T", "dim:d", "keepdim:b")) for name in ("amax", "amin")},
    "logsumexp": (("T", "dim:d"), ("T", "dim:d", "keepdim:b")),
    "flip": (("T", "dims:d"),), "permute": (("T", "dims:d"),),
    "roll": (("T", "shifts:d"), ("T", "shifts:d", "dims:d")),
    "movedim": (("T", "source:i", "destination:i"), ("T", "source:d", "destination:d")),
    "masked_fill": (("T", "mask:T", "value:T|n"),),
    "index_select": (("T", "dim:i", "index:T"),),
    "index_add": (("T", "dim:i", "index:T", "source:T"),),
    "stack": (("TL",), ("TL", "dim:i")),
    **{name: (("T",), ("T", "diagonal:i")) for name in ("tril", "triu")},
    **{name: (("T", "T"),) for name in ("outer", "dot", "mv")},
    **{name: (("T",), ("T", "dtype:dtype")) for name in _LIKE},
    "full_like": (("T", "fill_value:n"),),
    "repeat_interleave": (("T", "repeats:T"), ("T", "repeats:T", "dim:i"), ("T", "repeats:si"),
                          ("T", "repeats:si", "dim:i")),
}
TENSOR_METHODS: dict[str, tuple[tuple[str, ...], ...]] = {
    **{name: ((),) for name in _UNARY},
    **{name: (("T|n",),) for name in ("mul", "add", "sub", "div", "pow", "gt", "ge", "lt", "le",
                                      "eq", "ne", "fmod", "remainder")},
    **{name: (("T",),) for name in ("maximum", "minimum", "logical_and", "logical_or")},
    "matmul": (("T",),), "mm": (("T",),), "bmm": (("T",),), "type_as": (("T",),),
    "expand_as": (("T",),), "reshape_as": (("T",),), "view_as": (("T",),),
    **{name: ((), ("dim:d",), ("dim:d", "keepdim:b")) for name in ("sum", "mean")},
    "t": ((),), "contiguous": ((),), "clone": ((),), "detach": ((),),
    "unsqueeze": (("n",),), "squeeze": ((), ("n",)), "transpose": (("n", "n"),),
    "index_select": (("n", "T"),), "index_add": (("n", "T", "T"),), "clamp": (("n", "n"),),
    "expand": (("s",),), "reshape": (("s",),), "view": (("s",),), "sum_to_size": (("s",),),
    "to": (("dtype",),),
    "gather": (("i", "T"),), "scatter_add": (("i", "T", "T"),),
    "scatter": (("i", "T", "T|n"), ("i", "T", "src:T"), ("i", "T", "value:n")),
    "narrow": (("i", "si", "si"),), "diff": ((), ("i",), ("i", "i")),
    "flatten": ((), ("i",), ("i", "i")),
    **{name: (("dim:i",),) for name in _ALONG_DIM},
    **{name: ((), ("dim:d",), ("dim:d", "keepdim:b")) for name in ("amax", "amin")},
    "logsumexp": (("dim:d",), ("dim:d", "keepdim:b")),
    "flip": (("dims:d",),), "permute": (("dims:d",),),
    "roll": (("shifts:d",), ("shifts:d", "dims:d")),
    "movedim": (("source:i", "destination:i"), ("source:d", "destination:d")),
    "masked_fill": (("mask:T", "value:T|n"),),
    **{name: ((), ("diagonal:i",)) for name in ("tril", "triu")},
    **{name: (("T",),) for name in ("outer", "dot", "mv")},
    "diagonal": ((), ("offset:i",), ("offset:i", "dim1:i", "dim2:i")),
    "select": (("dim:i", "index:si"),),
    "unflatten": (("dim:i", "sizes:s"),),
    "repeat": (("repeats:s",),),
    "chunk": (("chunks:i",), ("chunks:i", "dim:i")),
    "unbind": ((), ("dim:i",)),
    "unfold": (("dimension:i", "size:i", "step:i"),),
    "repeat_interleave": (("repeats:T",), ("repeats:T", "dim:i"), ("repeats:si",),
                          ("repeats:si", "dim:i")),
}
# Tensor's dtype casts (`idx.long()`), which C++ spells `.to(<ScalarType>)`.
_CAST_METHODS = {"float": "Float", "double": "Double", "half": "Half", "bfloat16": "BFloat16",
                 "long": "Long", "int": "Int", "short": "Short", "char": "Char", "byte": "Byte",
                 "bool": "Bool"}
# Methods and torch functions giving a list of tensors (`split`: codegen's own, by its argument).
_LIST_RESULTS = {"chunk", "unbind", "split"}
# Methods whose sizes argument is SymInt in C++ (`<name>_symint`).
_SYMINT_METHODS = {"expand", "reshape", "view", "sum_to_size", "unflatten", "repeat"}
# Methods taking their sizes or dims as a list or as separate ints (`x.permute(1, 0)`).
_VARARGS_METHODS = {"permute", "flip", "reshape", "view", "expand", "repeat", "sum_to_size"}
# Methods whose SymInt arguments C++ takes in `<name>_symint` only.
_SYMINT_ONLY = {"narrow", "select", "repeat_interleave"}

_BINARY_CPP = {F.BinOpKind.add: "+", F.BinOpKind.sub: "-", F.BinOpKind.mul: "*",
               F.BinOpKind.div: "/"}
_COMPARE = {F.BinOpKind.eq: ("eq", "==", "eq"), F.BinOpKind.ne: ("ne", "!=", "ne"),
            F.BinOpKind.lt: ("lt", "<", "gt"), F.BinOpKind.le: ("le", "<=", "ge"),
            F.BinOpKind.gt: ("gt", ">", "lt"), F.BinOpKind.ge: ("ge", ">=", "le")}


# Names the generated backward declares or reads unqualified: its parameter and locals, the
# members of torch::autograd::Node it calls, the types it spells, the helpers of autograd.cpp.
# The locals holding the op's inputs and the formulas' bindings are named apart from them (an
# input keeps its name in the op's API and its C++ signature; the local moves).
_APPLY_NAMES = frozenset({"grads", "grad_inputs", "lock", "mutex_", "input_metadata",
                          "task_should_compute_output", "getptr", "size_t",
                          "opgen_save_list", "opgen_unpack_list", "opgen_true_divide",
                          "opgen_floordiv", "opgen_mod", "opgen_not_implemented",
                          "opgen_concat", "opgen_slice", "opgen_optional"})
# Namespaces the generated C++ names: always qualified (`at::Tensor`), and the name before `::`
# finds namespaces and types only, so an argument `at` or `std` hides none. Bindings still keep
# off them, for the reader.
_NAMESPACES = frozenset({"at", "c10", "std", "torch"})


class NotCpp(Exception):
    """What keeps an op's autograd in Python; `loc`: the formula it is in, where there is one."""

    loc: Loc | None = None


class Why(str):
    """Why an op keeps Python autograd, and the formula that says so (None: the op's)."""

    loc: Loc | None = None


def _bind(params: tuple[str, ...], args: tuple[F.Expr, ...],
          kwargs: tuple[tuple[str, F.Expr], ...], required: int, what: str) -> dict[str, F.Expr]:
    """A call's arguments by parameter, as Python binds them to `params`, of which the first
    `required` must be given; NotCpp(`what`) for any other call."""
    named = dict(kwargs)
    if len(args) > len(params) or set(named) - set(params) or \
            any(p in named for p in params[:len(args)]) or \
            any(p not in named for p in params[len(args):required]):
        raise NotCpp(what)
    return dict(zip(params, args)) | named


# What a note calls the formula forms the translation does not carry (not the IR's class names).
_FORMS = {F.EllipsisLit: "'...'", F.GradsRef: "'grads' as a whole",
          F.ResultsRef: "'results' as a whole", F.Star: "'*' unpacking", F.Slice: "slicing",
          F.TupleLit: "a tuple", F.BuiltinRef: "a builtin not called",
          F.PyBuiltinRef: "a builtin not called", F.OpRef: "a library op not called"}


class _Unresolved(Exception):
    """A formula calls an op the library lacks: an error of formulas.check_library, no note."""


def autograd_path(project: Project, ns: str) -> str:
    return f"{output_dir(project)}/cpp/{ns}/autograd.cpp"


def file_setting(lib: OpLibrary, op: Op) -> str | None:
    """The `autograd:` of the op file declaring `op`: looked up by identity (a map built once per
    library), else by equality (an op of another load of the same files)."""
    settings = _file_settings(lib)
    if id(op) in settings:
        return settings[id(op)]
    return next((f.autograd for f in lib.files if op in f.ops), None)


@per_object
def _file_settings(lib: OpLibrary) -> dict[int, str | None]:
    return {id(o): f.autograd for f in lib.files for o in f.ops}


def _is_python(op: Op) -> bool:
    return any(isinstance(k, PyRef) for _, k in op.dispatch)


# --------------------------------------------------------------------------------------------------
# The plan of one op


@dataclass
class Member:
    name: str       # member of the node
    ctype: str
    init: str       # expression (in the Autograd kernel) it is set from


@dataclass
class Plan:
    op: Op
    cls: str                                    # the Node subclass
    kernel: str                                 # the Autograd kernel function
    sig: cpp.CppSignature
    members: list[Member]
    saved_results: list[tuple[str, int]]        # (member, return index)
    releases: list[str]                         # members to reset in release_variables
    slots: list[tuple[str, bool]]               # tensor inputs in edge order: (arg, is list)
    body: list[str]                             # apply's body
    diff_returns: list[int]                     # returns that get history, in node-input order
    returns_tuple: bool
    calls: list[Op]                             # library ops the formulas call
    helpers: frozenset[str] = frozenset()       # opgen_ helpers the body calls, beyond the
                                                # ones every autograd.cpp defines


def reason(lib: OpLibrary, op: Op) -> str | None:
    """Why `op` (which has derivatives) keeps Python autograd; None when it gets C++."""
    r = _plan(lib, op)
    return r if isinstance(r, str) else None


def plan(lib: OpLibrary, op: Op) -> Plan | None:
    r = _plan(lib, op)
    return r if isinstance(r, Plan) else None


def uses_cpp(lib: OpLibrary, op: Op) -> bool:
    """Whether `op`'s Autograd kernel is the generated C++ one (the Python path skips it)."""
    return plan(lib, op) is not None


def _plan_uncached(lib: OpLibrary, op: Op) -> Plan | str | None:
    d = op.derivatives
    if not isinstance(d, F.Derivatives):
        return None
    if namespace_abi(lib, op.namespace) is not None:
        return "its namespace is on the stable ABI, which has no autograd API"
    if file_setting(lib, op) == "python":
        return "its op file says 'autograd: python'"
    if _is_python(op):
        return "its kernels are Python functions"
    sig = cached_signature(op.schema)
    if isinstance(sig, cpp.Unsupported):
        return "its schema has no C++ binding"
    try:
        return _Builder(lib, op, d, sig).build()
    except _Unresolved:
        return None
    except NotCpp as e:
        why = str(e)
        if not why.startswith(("its ", "a return", "argument", "a formula")):
            why = f"its formulas use {why}, which the C++ translation does not carry"
        located = Why(why)
        located.loc = e.loc
        return located


def _plan(lib: OpLibrary, op: Op) -> Plan | str | None:
    # Once per op of a library (the library is frozen; py_reg, check and this module ask), keyed
    # by the op's identity and kept with it, so that its id is not reused.
    return memo(lib, (_plan, id(op)), lambda: (op, _plan_uncached(lib, op)))[1]


def check(lib: OpLibrary, diags: Diagnostics) -> None:
    """A note per differentiable op of a full-ABI namespace with C++ kernels that keeps Python
    autograd."""
    if diags.has_errors or not check_formulas(lib, Diagnostics()):
        return  # the errors come first; which path an op takes is settled once they are fixed
    for op in lib.ops:
        if not isinstance(op.derivatives, F.Derivatives):
            continue
        # Chosen paths: the stable ABI, `autograd: python`, and Python kernels (a C++ program
        # cannot call such an op at all) say nothing.
        if (namespace_abi(lib, op.namespace) is not None or file_setting(lib, op) == "python"
                or _is_python(op)):
            continue
        why = reason(lib, op)
        if why is not None:
            loc = getattr(why, "loc", None) or op.derivatives.loc or op.loc
            diags.note(loc, f"{op.name}: its Autograd kernel stays in Python: {why}",
                       "a C++ program linking the library cannot differentiate this op")
    for op in lib.ops:
        if (why := _prefixed_argument(op)) and _mutating_in_cpp_but_for_names(lib, op):
            diags.note(op.loc, f"{op.name}: its Autograd kernel stays in Python: {why}",
                       "a C++ program linking the library runs the op without it")


def _prefixed_argument(op: Op) -> str | None:
    """Why an argument of `op` keeps its Autograd kernel out of C++, or None: the kernel's
    parameters are the arguments, beside its own locals and the helpers it calls, all `opgen_*`."""
    for a in op.schema.arguments:
        if a.name.startswith("opgen_"):
            return (f"argument '{a.name}' starts with 'opgen_', the prefix of the names the "
                    "generated C++ declares beside the op's arguments")
    return None


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"_+", name) if p)


class _Builder:
    def __init__(self, lib: OpLibrary, op: Op, d: F.Derivatives, sig: cpp.CppSignature):
        self.lib, self.op, self.d, self.sig = lib, op, d, sig
        self.schema = op.schema
        self.cname = {a.name: b.name for a, b in zip(self.schema.arguments,
                                                     (b for b in sig.arguments))}
        self.kinds: dict[str, str] = {}          # local -> kind
        self.meta_only: set[str] = set()
        self.used_names: set[str] = (set(reserved.CPP_KEYWORDS) | reserved.CPP_UNQUALIFIED_TYPES
                                     | _APPLY_NAMES | _NAMESPACES)
        self.locals: dict[str, str] = {}
        self.refs: dict[F.OpRef, Op] = {}
        self.helpers: set[str] = set()

    # -- naming
    def fresh(self, name: str) -> str:
        name = reserved.fresh(name, self.used_names)
        self.used_names.add(name)
        return name

    def build(self) -> Plan:
        schema, d, op = self.schema, self.d, self.op
        if any(isinstance(strip_optional(r.type), ListType) or not is_tensor_like(r.type)
               for r in schema.returns):
            raise NotCpp("a return is not a Tensor (Tensor[] and non-Tensor returns are carried "
                         "by the Python path only)")
        if not schema.returns:
            raise NotCpp("it returns nothing")
        for ref in library_calls(d):
            target = F.resolve(self.lib, ref)
            if target is None:
                raise _Unresolved()
            if _is_python(target):
                raise NotCpp(f"its formulas call {target.name}, whose kernel is Python")
            # A callee with torch's not-implemented Autograd kernel raises, naming itself, when a
            # second backward reaches it, as aten's do; else only Python marks the gradients.
            if target in first_order_only(self.lib, op) and \
                    not not_differentiable_in_cpp(self.lib, target):
                raise NotCpp(f"its formulas call {target.name}, which has no derivatives "
                             "(the Python path makes the op differentiable once, with an error "
                             "naming it on a second backward)")
            if isinstance(cached_signature(target.schema), cpp.Unsupported):
                raise NotCpp(f"its formulas call {target.name}, whose schema has no C++ binding")
            if not _tensors(target, 1) and not _only_whole_tuples(d, ref, target):
                raise NotCpp(f"its formulas call {target.name}, which does not return one Tensor")
            self.refs[ref] = target
        if constants := constant_reads(self.lib, op):
            what = F.output_words(op.schema.returns, constants[0][1])
            raise NotCpp(f"its formulas read {what}, non-differentiable, as a constant (the "
                         "Python path makes the op differentiable once, with an error on a "
                         "second backward)")
        saved = F.saved(d, schema)
        self.meta_only = {a for a, _ in saved.meta}
        cls = f"{_camel(op.name.name)}{'_' + _camel(op.name.overload) if op.name.overload else ''}Backward"
        kernel = kernel_name(op)
        members: list[Member] = []
        releases: list[str] = []
        # Names of members: the argument's C++ name with a suffix (Node's own members have
        # none of these suffixes); apply's locals are named apart from them.
        prefixed = _prefixed_argument(op)
        if prefixed:
            raise NotCpp(prefixed)
        self.used_names.update(self.cname.values())
        self.used_names.update(handle_name(t) for t in self.refs.values())

        def member(name: str, suffix: str) -> str:
            return f"{self.cname[name]}_{suffix}_"

        # apply's prologue: each value the formulas read, as a local named like the input, chosen
        # once every member is known: (input, declared type, initializer).
        prologue: list[tuple[str, str, str]] = []
        meta_locals: dict[tuple[str, str], str] = {}
        for name in saved.tensors:
            m = member(name, "saved")
            members.append(Member(m, "torch::autograd::SavedVariable",
                                  f"torch::autograd::SavedVariable({self.cname[name]}, false)"))
            releases.append(m)
            prologue.append((name, "auto", f"{m}.unpack()"))
            self.kinds[name] = T
        for name in saved.tensor_lists:
            m = member(name, "saved")
            members.append(Member(m, "std::vector<torch::autograd::SavedVariable>",
                                  f"opgen_save_list({self.cname[name]})"))
            releases.append(m)
            prologue.append((name, "auto", f"opgen_unpack_list({m})"))
            self.kinds[name] = TL
        for name, what in saved.meta:
            arg = self.schema.argument(name)
            assert arg is not None
            optional = isinstance(arg.type, OptionalType)
            m = member(name, {"shape": "sizes", "dtype": "dtype", "device": "device"}[what])
            ctype, init = {
                "shape": ("std::vector<c10::SymInt>", "{c}.sym_sizes().vec()"),
                "dtype": ("at::ScalarType", "{c}.scalar_type()"),
                "device": ("at::Device", "{c}.device()"),
            }[what]
            if optional:
                # Read by its own formula (a bias's dtype), where it is given: kept when it is;
                # read where it was None, `.value()` throws, as Python raises on None.dtype.
                c = self.cname[name]
                value = init.format(c=f"(*{c})")
                members.append(Member(m, f"std::optional<{ctype}>",
                                      f"{c}.has_value() && {c}->defined() ? "
                                      f"std::make_optional({value}) : std::nullopt"))
                meta_locals[(name, what)] = f"{m}.value()"
                continue
            members.append(Member(m, ctype, init.format(c=self.cname[name])))
            meta_locals[(name, what)] = m
        for name in saved.values:
            arg = self.schema.argument(name)
            assert arg is not None
            kind = self._value_kind(arg.type)
            if kind is None:
                raise NotCpp(f"a formula reads '{name}' ({arg.type}), which the C++ translation "
                             "does not carry")
            try:
                ctype = cpp.owned_type(arg.type).cpp()
            except cpp.Unsupported:
                raise NotCpp(f"'{name}' ({arg.type}) has no owning C++ type")
            m = member(name, "value")
            init = self.cname[name]
            if isinstance(strip_optional(arg.type), ListType):
                init = f"{init}.vec()"
            elif strip_optional(arg.type) == BaseType(BaseTy.str):
                init = f"std::string({init})"
            members.append(Member(m, ctype, init))
            prologue.append((name, "const auto&", m))
            self.kinds[name] = kind
        self.meta_locals = meta_locals
        # Edges: every Tensor-like argument, in order (lists contribute one per element); their
        # offsets, as Tensor[] inputs have a length known at the call only.
        slots = [(a.name, isinstance(strip_optional(a.type), ListType))
                 for a in self.schema.arguments if is_tensor_like(a.type)]
        counts: list[str] = []
        count_members: list[Member] = []
        offsets: dict[str, str] = {}
        for name, is_list in slots:
            offsets[name] = " + ".join(counts) or "0"
            if is_list:
                m = member(name, "count")
                count_members.append(Member(m, "size_t", f"{self.cname[name]}.size()"))
                counts.append(m)
            else:
                counts.append("1")
        # apply's locals and the bindings are named apart from every member they could hide.
        self.used_names.update(m.name for m in members + count_members)
        saved_results: list[tuple[str, int]] = []
        result_locals = self._result_names()
        result_prologue: list[str] = []
        for i in saved.results:
            m = f"{result_locals[i]}_saved_"
            members.append(Member(m, "torch::autograd::SavedVariable", ""))
            saved_results.append((m, i))
            releases.append(m)
            result_prologue.append(f"auto {result_locals[i]} = {m}.unpack(getptr());")
            self.used_names.add(m)
        members += count_members
        diff = [i for i in range(len(schema.returns))
                if not d.output_differentiability or d.output_differentiability[i]]
        grad_names = self._grad_names()
        # Each input's local is its C++ name, unless apply or a member has that name.
        clash = _APPLY_NAMES | {m.name for m in members}
        self.input_locals = {name: self.fresh(self.cname[name])
                             if self.cname[name] in clash else self.cname[name]
                             for name, _, _ in prologue}
        body = ["std::lock_guard<std::mutex> lock(mutex_);"]
        # Undefined output gradients are zeros, as autograd.Function materializes them.
        body.append("for (size_t i = 0; i < grads.size(); ++i) {")
        body.append("  if (!grads[i].defined() && !input_metadata(i).was_default_constructed()) {")
        body.append("    grads[i] = input_metadata(i).zeros_like();")
        body.append("  }")
        body.append("}")
        for i, g in enumerate(grad_names):
            if i in diff:
                body.append(f"[[maybe_unused]] const at::Tensor& {g} = grads[{diff.index(i)}];")
        self.grad_locals = {i: g for i, g in enumerate(grad_names) if i in diff}
        self.result_locals = result_locals
        body += [f"{decl} {self.input_locals[name]} = {init};" for name, decl, init in prologue]
        body += result_prologue
        total = " + ".join(counts)
        body.append(f"torch::autograd::variable_list grad_inputs({_fold(total)});")
        self.offsets = offsets
        self.slots = dict(slots)
        # formulas
        for f in d.formulas:
            try:
                body += self._formula(f)
            except NotCpp as e:
                e.loc = e.loc or f.loc
                raise
        body.append("return grad_inputs;")
        names = [m.name for m in members]
        assert len(set(names)) == len(names), names    # suffixes, and results' fresh locals
        return Plan(op, cls, kernel, self.sig, members, saved_results, releases, slots, body,
                    diff, len(schema.returns) > 1, list(dict.fromkeys(self.refs.values())),
                    frozenset(self.helpers))

    def _value_kind(self, t) -> str | None:
        opt = isinstance(t, OptionalType)
        base = strip_optional(t)
        if opt:
            # carried to a library op's parameter of the same type only (`scale=scale`)
            if isinstance(base, BaseType) and base.name in (BaseTy.float, BaseTy.int,
                                                            BaseTy.bool, BaseTy.SymInt):
                return f"{OPTIONAL}{t}"
            return None
        if isinstance(base, BaseType):
            return {BaseTy.float: FLT, BaseTy.int: INT, BaseTy.bool: BOOL,
                    BaseTy.Scalar: SCALAR, BaseTy.str: STR, BaseTy.SymInt: SYMINT}.get(base.name)
        if isinstance(base, ListType) and isinstance(base.elem, BaseType):
            if base.elem.name is BaseTy.float:
                return "float[]"
            if base.elem.name is BaseTy.int:
                return "int[]"
        return None

    def _result_names(self) -> list[str]:
        rs = self.schema.returns
        if len(rs) == 1:
            return [self.fresh("result")]
        return [self.fresh(f"result_{r.name}" if r.name else f"result{i}")
                for i, r in enumerate(rs)]

    def _grad_names(self) -> list[str]:
        rs = self.schema.returns
        if len(rs) == 1:
            return [self.fresh("grad")]
        return [self.fresh(f"grad_{r.name}" if r.name else f"grad{i}") for i, r in enumerate(rs)]

    # -- formulas
    def _needs(self, name: str) -> str:
        off = _fold(self.offsets[name])
        if self.slots[name]:
            m = f"{self.cname[name]}_count_"
            return f"torch::autograd::IndexRange{{{off}, {_fold(off + ' + ' + m)}}}"
        return f"torch::autograd::IndexRange{{{off}, {_fold(off + ' + 1')}}}"

    def _formula(self, f: F.Formula) -> list[str]:
        cond = "task_should_compute_output({" + ", ".join(self._needs(n) for n in f.inputs) + "})"
        lines = [f"if ({cond}) {{"]
        inner: list[str] = []
        saved_locals = dict(self.locals)
        for name, value in f.bindings:
            code, kind = self.expr(value)
            local = self.fresh(name)
            self.locals[name] = local
            self.kinds["$" + name] = kind
            inner.append(f"auto {local} = {code};")
        values: list[tuple[str, Callable[[], tuple[str, str]]]]
        if len(f.inputs) > 1 and _whole_tuple(f, self.lib):
            # `a, b: f_backward(...)` (flash-attention's): the call once, each input its element
            assert isinstance(f.expr, F.Call)
            if any(self.slots[name] for name in f.inputs):
                raise NotCpp("a call giving the gradients of several inputs, one a Tensor[]")
            call, _ = self._call(f.expr)
            grads = self.fresh("input_grads")
            inner.append(f"auto {grads} = {call};")
            target = F.resolve(self.lib, f.expr.func)
            # an optional return's None is an undefined Tensor: no gradient, as in Python
            values = [(name, lambda i=i, r=r: (
                f"std::get<{i}>({grads})" + (".value_or(at::Tensor())"
                                             if isinstance(r.type, OptionalType) else ""), T))
                      for i, (name, r) in enumerate(zip(f.inputs, target.schema.returns))]
        elif len(f.inputs) > 1:
            if not isinstance(f.expr, F.TupleLit) or len(f.expr.items) != len(f.inputs):
                raise NotCpp("a formula for several inputs is not a tuple literal")
            values = [(name, partial(self.expr, e)) for name, e in zip(f.inputs, f.expr.items)]
        else:
            values = [(f.inputs[0], partial(self.expr, f.expr))]
        for name, value in values:
            code, kind = value()
            is_list = self.slots[name]
            off = _fold(self.offsets[name])
            if kind == NONE:
                continue
            if is_list:
                if kind != TL:
                    raise NotCpp(f"the formula for Tensor[] '{name}' is not a list of tensors")
                g = self.fresh(f"{name}_grad")
                m = f"{self.cname[name]}_count_"
                inner += [f"auto {g} = {code};",
                          f"TORCH_CHECK({g}.size() == {m}, \"{self.op.name}: the formula for "
                          f"'{name}' gives \", {g}.size(), \" gradients for \", {m}, \" tensors\");",
                          f"for (size_t i = 0; i < {m}; ++i) {{",
                          f"  grad_inputs[{_fold(off + ' + i')}] = {g}[i];",
                          "}"]
            else:
                if kind != T:
                    raise NotCpp(f"the formula for '{name}' is not a Tensor expression")
                if len(values) > 1:
                    inner.append(f"if (task_should_compute_output({off})) {{")
                    inner.append(f"  grad_inputs[{off}] = {code};")
                    inner.append("}")
                else:
                    inner.append(f"grad_inputs[{off}] = {code};")
        self.locals = saved_locals
        lines += ["  " + line for line in inner]
        lines.append("}")
        return lines

    def expr(self, e: F.Expr) -> tuple[str, str]:
        match e:
            case F.Const(value=v):
                if v is None:
                    return "at::Tensor()", NONE
                if isinstance(v, bool):
                    return ("true" if v else "false"), BOOL
                if isinstance(v, int):
                    return (f"int64_t{{{v}}}" if abs(v) >= 2**31 else str(v)), INT
                if isinstance(v, float):
                    text = repr(v)
                    if not any(c in text for c in ".eEn"):
                        text += ".0"
                    return text, FLT
                if isinstance(v, str):
                    return f"std::string_view({cpp.string_literal(v)})", STR
                raise NotCpp(f"the literal {v!r}")
            case F.InputRef(name=name):
                if name in self.meta_only:
                    raise NotCpp(f"'{name}' is read for metadata in a way C++ does not follow")
                if name not in self.kinds:
                    raise NotCpp(f"'{name}' is not carried")
                return self.input_locals[name], self.kinds[name]
            case F.GradRef(index=i):
                if i not in self.grad_locals:
                    raise NotCpp("a formula reads the gradient of a non-differentiable output")
                return self.grad_locals[i], T
            case F.ResultRef(index=i):
                return self.result_locals[i], T
            case F.LocalRef(name=name) | F.LoopVar(name=name):
                if name not in self.locals:
                    raise NotCpp(f"'{name}'")
                return self.locals[name], self.kinds["$" + name]
            case F.Attr(obj=F.InputRef(name=name), name=attr) if name in self.meta_only:
                what = F.META_ATTRS.get(attr)
                m = self.meta_locals.get((name, what)) if what else None
                if m is None:
                    raise NotCpp(f"{name}.{attr}")
                if attr == "ndim":
                    return f"static_cast<int64_t>({m}.size())", INT
                return m, {"shape": SIZES, "dtype": DTYPE, "device": DEVICE}[what]
            case F.Attr(obj=obj, name=attr):
                code, kind = self.expr(obj)
                if kind == T and attr == "shape":
                    return f"{code}.sym_sizes()", SIZES
                if kind == T and attr == "ndim":
                    return f"{code}.dim()", INT
                if kind == T and attr == "dtype":
                    return f"{code}.scalar_type()", DTYPE
                raise NotCpp(f"the attribute .{attr}")
            case F.Call():
                return self._call(e)
            case F.BinOp(op=op, left=a, right=b):
                return self._binop(op, a, b)
            case F.UnaryOp(op=op, operand=o):
                code, kind = self.expr(o)
                if op is F.UnaryKind.neg and kind == SYMFLOAT:   # which has no unary minus
                    return f"(c10::SymFloat(-1.0) * {code})", kind
                if op is F.UnaryKind.neg and (kind == T or kind in (FLT, INT, SYMINT)):
                    return f"(-{code})", kind
                if op is F.UnaryKind.pos and (kind == T or kind in ARITH):
                    return code, kind
                if op is F.UnaryKind.not_ and kind == BOOL:
                    return f"(!{code})", BOOL
                if op is F.UnaryKind.invert and kind == T:
                    return f"{code}.bitwise_not()", T
                raise NotCpp(f"the operator {op.value.strip()} on a {kind}")
            case F.IfExp(cond=c, then=t, orelse=o):
                cc, ck = self.expr(c)
                tc, tk = self.expr(t)
                oc, ok = self.expr(o)
                if ck != BOOL:
                    raise NotCpp("a condition that is not a bool")
                kinds = {tk, ok} - {NONE}
                if len(kinds) != 1 or (NONE in (tk, ok) and kinds != {T}):
                    raise NotCpp("a conditional whose branches have different types")
                kind = kinds.pop()
                if kind in (FLT, INT) and tk != ok:
                    raise NotCpp("a conditional mixing int and float")
                return f"({cc} ? {tc} : {oc})", kind
            case F.Subscript(obj=obj, items=items):
                return self._subscript(obj, items)
            case F.ListLit(items=items):
                parts = [self.expr(i) for i in items]
                if all(k in (T, NONE) for _, k in parts):
                    return ("std::vector<at::Tensor>{" + ", ".join(c for c, _ in parts) + "}",
                            TL)
                # A list of sizes: of SymInts where one is symbolic, else of ints.
                if all(k == INT for _, k in parts):
                    return "std::vector<int64_t>{" + ", ".join(c for c, _ in parts) + "}", \
                        "int[]"
                if all(k in (INT, SYMINT) for _, k in parts):
                    return ("std::vector<c10::SymInt>{" + ", ".join(c for c, _ in parts) + "}",
                            SIZES)
                raise NotCpp("a list literal of other than tensors or integers")
            case F.ListComp():
                return self._listcomp(e)
            case F.TorchRef(path=(name,)) if scalar_type_number(name) is not None:
                return SCALAR_TYPES[scalar_type_number(name)].cpp, DTYPE     # torch.float64
            case F.TorchRef(path=path):     # a value such as torch.pi
                raise NotCpp("torch" + "".join("." + p for p in path))
        raise NotCpp(_FORMS.get(type(e), "this form of expression"))

    def _subscript(self, obj: F.Expr, items: tuple[F.Expr, ...]) -> tuple[str, str]:
        single = items[0] if len(items) == 1 else None
        if isinstance(obj, F.Attr) and obj.name == "shape" and single is not None \
                and not isinstance(single, (F.Slice, F.EllipsisLit)):
            ic, ik = self.expr(single)
            if ik != INT:
                raise NotCpp(f"indexing sizes with a {ik}")
            if isinstance(obj.obj, F.InputRef) and obj.obj.name in self.meta_only:
                return _size_at(self.meta_locals[(obj.obj.name, "shape")], ic), SYMINT
            tc, tk = self.expr(obj.obj)
            if tk == T:
                return f"{tc}.sym_size({ic})", SYMINT
        code, kind = self.expr(obj)
        if kind == TL:
            if isinstance(single, F.Const) and isinstance(single.value, int) \
                    and not isinstance(single.value, bool):
                i = single.value
                return f"{code}.at({i})" if i >= 0 else f"{code}.at({code}.size() - {-i})", T
            if any(isinstance(i, F.Slice) for i in items):
                raise NotCpp("slicing a Tensor[]")
            raise NotCpp("indexing a Tensor[] other than with an integer literal")
        if kind in (SIZES, "int[]") and isinstance(single, F.Slice) and (
                single.step is None or isinstance(single.step, F.Const)
                and single.step.value is None):
            bounds = []
            for b in (single.lo, single.hi):
                if b is None or isinstance(b, F.Const) and b.value is None:
                    bounds.append("::std::nullopt")
                    continue
                bc, bk = self.expr(b)
                if bk != INT:
                    raise NotCpp(f"slicing sizes with {_a(bk)} as a bound")
                bounds.append(bc)
            self.helpers.add("opgen_slice")
            elem = "c10::SymInt" if kind == SIZES else "int64_t"
            return f"opgen_slice<{elem}>({code}, {', '.join(bounds)})", kind
        if kind == SIZES:
            raise NotCpp("slicing sizes with a step" if isinstance(single, F.Slice) else
                         "indexing sizes other than a tensor's .shape with an int")
        if kind != T:
            raise NotCpp(f"indexing a {kind}")
        # Tensor::index is Python's indexing (the same at::indexing code, Ellipsis and None
        # included), so negative and out-of-range bounds and zero steps behave as they do there.
        return f"{code}.index({{{', '.join(self._index(i) for i in items)}}})", T

    def _index(self, item: F.Expr) -> str:
        """One item of a Tensor's subscript as an at::indexing::TensorIndex."""
        if isinstance(item, F.EllipsisLit):
            return "at::indexing::Ellipsis"
        if isinstance(item, F.Const) and item.value is None:
            return "at::indexing::None"
        if isinstance(item, F.Slice):
            bounds = [self._slice_bound(b) for b in (item.lo, item.hi, item.step)]
            while bounds and bounds[-1] is None:
                bounds.pop()
            return f"at::indexing::Slice({', '.join(b or 'std::nullopt' for b in bounds)})"
        code, kind = self.expr(item)
        if kind in (INT, SYMINT):
            return code
        raise NotCpp(f"indexing a Tensor with a {kind}")

    def _slice_bound(self, bound: F.Expr | None) -> str | None:
        if bound is None or isinstance(bound, F.Const) and bound.value is None:
            return None
        code, kind = self.expr(bound)
        if kind in (INT, SYMINT):
            return code
        raise NotCpp(f"a slice bound that is a {kind}")

    def _binop(self, op: F.BinOpKind, a: F.Expr, b: F.Expr) -> tuple[str, str]:
        if op in (F.BinOpKind.is_, F.BinOpKind.is_not):
            other = b if isinstance(a, F.Const) and a.value is None else a
            if not (isinstance(b, F.Const) and b.value is None) and other is a:
                raise NotCpp("'is' with something other than None")
            code, kind = self.expr(other)
            if kind != T:
                raise NotCpp("'is None' on a non-Tensor")
            return (f"(!{code}.defined())" if op is F.BinOpKind.is_ else f"{code}.defined()"), BOOL
        ac, ak = self.expr(a)
        bc, bk = self.expr(b)
        tensors = ak == T or bk == T
        symbolic = bool({ak, bk} & {SYMINT, SYMFLOAT})
        if op is F.BinOpKind.add and ak in (SIZES, "int[]") and bk in (SIZES, "int[]"):
            self.helpers.add("opgen_concat")
            if ak == bk == "int[]":
                return f"opgen_concat({ac}, {bc})", "int[]"
            return f"opgen_concat({_sym_sizes(ac, ak)}, {_sym_sizes(bc, bk)})", SIZES
        if op in _COMPARE:
            fn, sym, flipped = _COMPARE[op]
            if ak == T and (bk == T or bk in SCALARS):
                return f"at::{fn}({ac}, {_sym_scalar(bc, bk)})", T
            if bk == T and ak in SCALARS:
                return f"at::{flipped}({bc}, {_sym_scalar(ac, ak)})", T
            if SYMFLOAT in (ak, bk) and ak in ARITH and bk in ARITH:
                return f"({_symfloat(ac, ak)} {sym} {_symfloat(bc, bk)})", BOOL
            if ak in ARITH and bk in ARITH or (ak == bk and ak in (BOOL, STR)):
                return f"({ac} {sym} {bc})", BOOL
            raise NotCpp(f"comparing a {ak} with a {bk}")
        if op in (F.BinOpKind.and_, F.BinOpKind.or_):
            if ak == BOOL and bk == BOOL:
                return f"({ac} {'&&' if op is F.BinOpKind.and_ else '||'} {bc})", BOOL
            raise NotCpp(f"'{op.value}' on non-bools")
        if op is F.BinOpKind.matmul and ak == T and bk == T:
            return f"at::matmul({ac}, {bc})", T
        if op is F.BinOpKind.pow:
            if ak == T and (bk == T or bk in SCALARS):
                return f"{ac}.pow({_sym_scalar(bc, bk)})", T
            if bk == T and ak in SCALARS:
                return f"at::pow({_sym_scalar(ac, ak)}, {bc})", T
            if ak in (FLT, INT) and bk in (FLT, INT):
                if ak == INT and bk == INT:
                    raise NotCpp("an integer power")
                return f"std::pow({ac}, {bc})", FLT
            raise NotCpp(f"** on a {ak} and a {bk}")
        if op in (F.BinOpKind.floordiv, F.BinOpKind.mod):
            return self._int_division(op, ac, ak, bc, bk)
        if op in _BINARY_CPP:
            sym = _BINARY_CPP[op]
            if tensors:
                if not ({ak, bk} <= {T, *SCALARS}):
                    raise NotCpp(f"{op.value} on a {ak} and a {bk}")
                if ak != T and bk != T:
                    raise AssertionError
                # Python numbers meet tensors as Scalars.
                return f"({_scalar(ac, ak)} {sym} {_scalar(bc, bk)})", T
            if ak in ARITH and bk in ARITH:
                floats = bool({ak, bk} & {FLT, SYMFLOAT})
                if op is F.BinOpKind.div:   # Python's: a float, even of two ints
                    if symbolic:
                        return f"opgen_true_divide({_symfloat(ac, ak)}, {_symfloat(bc, bk)})", \
                            SYMFLOAT
                    return f"opgen_true_divide({ac}, {bc})", FLT
                if symbolic and floats:
                    return f"({_symfloat(ac, ak)} {sym} {_symfloat(bc, bk)})", SYMFLOAT
                if symbolic:
                    return f"({ac} {sym} {bc})", SYMINT
                return f"({ac} {sym} {bc})", FLT if floats else INT
            raise NotCpp(f"{op.value} on a {ak} and a {bk}")
        raise NotCpp(f"the operator {op.value}")

    def _int_division(self, op: F.BinOpKind, ac: str, ak: str, bc: str, bk: str) \
            -> tuple[str, str]:
        """`//` and `%` of two integers (ints, SymInts), with Python's meaning: the quotient
        rounds toward negative infinity, the remainder takes the divisor's sign, and a zero
        divisor raises. C++'s `/` and `%` truncate, and c10::SymInt's do too for concrete values
        (for symbolic ones they are the graph's FloorDiv and PythonMod, Python's): so both go
        through the generated opgen_floordiv / opgen_mod, defined where a kernel calls them."""
        if ak in (INT, SYMINT) and bk in (INT, SYMINT):
            fn = "opgen_floordiv" if op is F.BinOpKind.floordiv else "opgen_mod"
            self.helpers.add(fn)
            if SYMINT in (ak, bk):
                return f"{fn}({_symint(ac, ak)}, {_symint(bc, bk)})", SYMINT
            return f"{fn}({ac}, {bc})", INT
        if ak in ARITH and bk in ARITH:
            raise NotCpp(f"{op.value} with a float operand")
        if T in (ak, bk):
            raise NotCpp(f"{op.value} on a Tensor")
        raise NotCpp(f"{op.value} on a {ak} and a {bk}")

    def _einsum(self, e: F.Call) -> str:
        """torch.einsum(equation, a, b, ...) or (equation, [a, b, ...]): at::einsum."""
        if e.kwargs or len(e.args) < 2:
            raise NotCpp("torch.einsum other than (equation, operands...)")
        eq, eq_kind = self.expr(e.args[0])
        if eq_kind != STR:
            raise NotCpp(f"torch.einsum with {_a(eq_kind)} equation")
        rest = e.args[1:]
        operands = rest[0] if len(rest) == 1 and isinstance(rest[0], F.ListLit) else \
            F.ListLit(tuple(rest))
        code, kind = self.expr(operands)
        if kind != TL:
            raise NotCpp("torch.einsum of other than tensors")
        return f"at::einsum({eq}, {code})"

    def _pad(self, e: F.Call) -> str:
        """torch.nn.functional.pad(input, pad, mode="constant", value=None): at::pad, with the
        pad sizes as SymInts."""
        given = _bind(("input", "pad", "mode", "value"), e.args, e.kwargs, 2,
                      "torch.nn.functional.pad other than (input, pad, mode, value)")
        xc, xk = self.expr(given["input"])
        pad = given["pad"]
        # a tuple of sizes, as Python callers often write it, is the list C++ takes
        pc, pk = self.expr(F.ListLit(pad.items) if isinstance(pad, F.TupleLit) else pad)
        if xk != T or pk not in (SIZES, "int[]"):
            raise NotCpp(f"torch.nn.functional.pad of {_given(xk)} by {_given(pk)}")
        mode = "\"constant\""
        if "mode" in given:
            mode, mk = self.expr(given["mode"])
            if mk != STR:
                raise NotCpp(f"torch.nn.functional.pad with {_given(mk)} mode")
        value = "std::nullopt"
        if "value" in given:
            vc, vk = self.expr(given["value"])
            if vk in (FLT, INT, BOOL):
                value = f"std::optional<double>({vc})"
            elif vk != NONE:
                raise NotCpp(f"torch.nn.functional.pad with {_given(vk)} value")
        return f"at::pad_symint({xc}, {_sym_sizes(pc, pk)}, {mode}, {value})"

    def _args(self, args: tuple[F.Expr, ...], kwargs: tuple[tuple[str, F.Expr], ...],
              specs: tuple[tuple[str, ...], ...], what: str) -> list[str]:
        parts = [self.expr(a) for a in args]
        named = {key: self.expr(v) for key, v in kwargs}
        for spec in specs:
            if len(spec) != len(parts) + len(named):
                continue
            given = list(parts)
            for param in spec[len(parts):]:
                key, _, _ = param.rpartition(":")
                if key not in named:
                    break
                given.append(named[key])
            else:
                kinds = [param.rpartition(":")[2] for param in spec]
                if all(_fits(k, s) for (_, k), s in zip(given, kinds)):
                    return [_converted(c, k, s) for (c, k), s in zip(given, kinds)]
        shown = [k for _, k in parts] + [f"{key}={k}" for key, (_, k) in named.items()]
        raise NotCpp(f"{what} with arguments of kinds " + ", ".join(shown))

    def _call(self, e: F.Call) -> tuple[str, str]:
        func = e.func
        if any(isinstance(a, F.Star) for a in e.args):
            raise NotCpp("a call with *arguments")
        if isinstance(func, F.BuiltinRef):
            if func.name == "unbroadcast":
                g, like = e.args
                gc, gk = self.expr(g)
                if gk != T:
                    raise NotCpp("unbroadcast of a non-Tensor")
                if isinstance(like, F.InputRef) and like.name in self.meta_only:
                    sizes = self.meta_locals[(like.name, "shape")]
                else:
                    lc, lk = self.expr(like)
                    if lk != T:
                        raise NotCpp("unbroadcast to a non-Tensor")
                    sizes = f"{lc}.sym_sizes()"
                return f"{gc}.sum_to_size_symint({sizes})", T
            if func.name == "not_implemented":
                (why,) = e.args
                if not isinstance(why, F.Const) or not isinstance(why.value, str):
                    raise NotCpp("not_implemented with a computed message")
                text = f"the derivative of {self.op.name} is not implemented: {why.value}"
                return f"opgen_not_implemented({cpp.string_literal(text)})", T
        if isinstance(func, F.OpRef):
            target = self.refs[func]
            tsig = cached_signature(target.schema)
            assert isinstance(tsig, cpp.CppSignature)   # build() refused the op otherwise
            parts = [self.expr(a) for a in e.args]
            named = {key: self.expr(v) for key, v in e.kwargs}
            if len(parts) > len(tsig.arguments):
                raise NotCpp(f"a call of {target.name} with too many arguments")
            given = dict(zip(range(len(e.args)), e.args)) | dict(e.kwargs)
            optional_inputs = {a.name for a in self.schema.arguments
                               if isinstance(a.type, OptionalType) and is_tensor_like(a.type)}
            args = []
            for i, b in enumerate(tsig.arguments):
                # formulas.check_library has matched the keywords to the schema's arguments
                part = parts[i] if i < len(parts) else named.get(b.argument.name)
                if part is not None:
                    c, k = part
                    t = b.argument.type
                    if k == NONE and isinstance(t, OptionalType):
                        # not `at::Tensor()`: that is an optional holding an undefined Tensor
                        args.append("::std::nullopt")
                        continue
                    source = given.get(i if i < len(parts) else b.argument.name)
                    if isinstance(source, F.InputRef) and source.name in optional_inputs \
                            and t == OptionalType(BaseType(BaseTy.Tensor)):
                        # a None input is unpacked as an undefined Tensor: None again, as the
                        # kernel of a `Tensor?` tests `has_value()`
                        self.helpers.add("opgen_optional")
                        args.append(f"opgen_optional({c})")
                        continue
                    if k.startswith(OPTIONAL):
                        if k != f"{OPTIONAL}{t}":
                            raise NotCpp(f"argument '{b.argument.name}' of {target.name} is "
                                         f"{t}, and the formula gives it {k[len(OPTIONAL):]}, "
                                         "which the C++ translation does not convert")
                        args.append(c)
                        continue
                    want = _arg_kind(t)
                    if want is None:
                        raise NotCpp(f"argument '{b.argument.name}' of {target.name} is "
                                     f"{_a(t)}, a type the C++ translation does not pass to a "
                                     "library op")
                    if want == "i" and k == SYMINT:
                        # What torch.ops' Python binding does with a SymInt given to an int: it
                        # guards on its value (torch.compile specializes it), as guard_int does.
                        args.append(_guarded(c))
                        continue
                    if not _fits(k, want):
                        raise NotCpp(f"argument '{b.argument.name}' of {target.name} is "
                                     f"{_a(t)}, and the formula gives it {_given(k)}, which the "
                                     "C++ translation does not convert to one")
                    args.append(c)
                elif b.default is not None:
                    args.append(b.default)
                else:
                    raise NotCpp(f"a call of {target.name} without '{b.argument.name}'")
            return f"{handle_name(target)}().call({', '.join(args)})", T
        if isinstance(func, F.TorchRef) and len(func.path) == 1 and func.path[0] in TORCH_FUNCTIONS:
            name = func.path[0]
            given = e.args
            if name == "cat" and given and isinstance(given[0], F.TupleLit):
                # torch.cat((a, b)) is torch.cat([a, b])
                given = (F.ListLit(given[0].items), *given[1:])
            if name == "clamp" and given:
                tc, tk = self.expr(given[0])
                if tk == T:
                    return f"at::clamp({tc}, {self._clamp_bounds(given[1:], e.kwargs)})", T
            args = self._args(given, e.kwargs, TORCH_FUNCTIONS[name], f"torch.{name}")
            cpp_name = name + "_symint" if name in _SYMINT_ONLY else name
            return f"at::{cpp_name}({', '.join(args)})", TL if name in _LIST_RESULTS else T
        if func == F.TorchRef(("einsum",)):
            return self._einsum(e), T
        if func == F.TorchRef(("nn", "functional", "pad")):
            return self._pad(e), T
        if func == F.TorchRef(("split",)) and e.args:
            tc, tk = self.expr(e.args[0])
            if tk == T:
                return self._split(tc, e.args[1:], e.kwargs, "split_size_or_sections"), TL
        if isinstance(func, F.Attr):
            if isinstance(func.obj, F.InputRef) and func.obj.name in self.meta_only \
                    and func.name in F.META_METHODS:
                sizes = self.meta_locals[(func.obj.name, "shape")]
                if func.name == "dim" and not e.args:
                    return f"static_cast<int64_t>({sizes}.size())", INT
                if func.name == "size" and not e.args:
                    return sizes, SIZES
                if func.name == "size" and len(e.args) == 1 and not e.kwargs:
                    ic, ik = self.expr(e.args[0])
                    if ik == INT:
                        return _size_at(sizes, ic), SYMINT
                raise NotCpp(f".{func.name}(...) of a tensor saved for its sizes only")
            oc, ok = self.expr(func.obj)
            if ok != T:
                raise NotCpp(f"the method .{func.name} of a {ok}")
            if func.name == "dim" and not e.args and not e.kwargs:
                return f"{oc}.dim()", INT
            if func.name == "size" and not e.args and not e.kwargs:
                return f"{oc}.sym_sizes()", SIZES
            if func.name == "size" and len(e.args) == 1 and not e.kwargs:
                ic, ik = self.expr(e.args[0])
                if ik == INT:
                    return f"{oc}.sym_size({ic})", SYMINT
            if func.name == "numel" and not e.args and not e.kwargs:
                return f"{oc}.sym_numel()", SYMINT
            if func.name == "clamp":
                return f"{oc}.clamp({self._clamp_bounds(e.args, e.kwargs)})", T
            if func.name in ("new_empty", "new_zeros", "new_ones", "new_full"):
                return self._new_tensor(oc, func.name, e.args, e.kwargs), T
            if func.name == "split":
                return self._split(oc, e.args, e.kwargs, "split_size"), TL
            if func.name in _CAST_METHODS and not e.args and not e.kwargs:
                return f"{oc}.to(at::ScalarType::{_CAST_METHODS[func.name]})", T
            if func.name in TENSOR_METHODS:
                given = e.args
                try:
                    args = self._args(given, e.kwargs, TENSOR_METHODS[func.name],
                                      f".{func.name}")
                except NotCpp:
                    if func.name not in _VARARGS_METHODS or not given or e.kwargs or any(
                            self.expr(a)[1] not in (INT, SYMINT) for a in given):
                        raise
                    given = (F.ListLit(tuple(given)),)  # x.view(n, -1) is x.view([n, -1])
                    args = self._args(given, e.kwargs, TENSOR_METHODS[func.name],
                                      f".{func.name}")
                method = func.name
                if method in _SYMINT_ONLY:
                    method += "_symint"
                elif method in _SYMINT_METHODS and any(
                        self.expr(a)[1] == SIZES for a in (*given, *dict(e.kwargs).values())):
                    method += "_symint"
                return f"{oc}.{method}({', '.join(args)})", \
                    TL if func.name in _LIST_RESULTS else T
            raise NotCpp(f"the method .{func.name}")
        if isinstance(func, F.TorchRef):
            raise NotCpp(f"torch.{'.'.join(func.path)}")
        if isinstance(func, F.PyBuiltinRef) and func.name in ("list", "len") \
                and len(e.args) == 1 and not e.kwargs:
            code, kind = self.expr(e.args[0])
            if kind in (SIZES, "int[]", TL):
                if func.name == "len":
                    return f"static_cast<int64_t>({code}.size())", INT
                return code, kind    # a copy, of values no formula changes: the list itself
        if isinstance(func, F.PyBuiltinRef) and func.name == "float" and len(e.args) == 1 \
                and not e.kwargs:
            code, kind = self.expr(e.args[0])
            if kind in (FLT, SYMFLOAT):
                return code, kind
            if kind in (INT, BOOL):
                return f"static_cast<double>({code})", FLT
            if kind == SYMINT:      # symbolic, as Python's float() of a SymInt is
                return f"c10::SymFloat({code})", SYMFLOAT
        if isinstance(func, F.PyBuiltinRef):
            # named: "this form of call" did not say which call to rewrite
            raise NotCpp(f"the builtin {func.name}()")
        raise NotCpp("this form of call")

    def _split(self, tc: str, args: tuple[F.Expr, ...], kwargs: tuple[tuple[str, F.Expr], ...],
               size_key: str) -> str:
        """`t.split(size, dim=0)` or `torch.split(t, ...)`: by a size (an int or a SymInt) or a
        list of sizes, each overload C++ has (`split_symint` for the symbolic ones)."""
        given, named = list(args), dict(kwargs)
        given += [named.pop(key) for key in (size_key, "dim")[len(given):] if key in named]
        if named or not 1 <= len(given) <= 2:
            raise NotCpp("split with arguments other than a size and a dim")
        sc, sk = self.expr(given[0])
        dim = "0"
        if len(given) == 2:
            dim, dk = self.expr(given[1])
            if dk != INT:
                raise NotCpp(f"split along {_a(dk)}")
        if sk in (SYMINT, SIZES):
            return f"{tc}.split_symint({sc}, {dim})"
        if sk == INT:
            return f"{tc}.split({sc}, {dim})"
        if sk == "int[]":
            return f"{tc}.split(at::IntArrayRef({sc}), {dim})"
        raise NotCpp(f"split by {_a(sk)}")

    def _clamp_bounds(self, args: tuple[F.Expr, ...],
                      kwargs: tuple[tuple[str, F.Expr], ...]) -> str:
        """The bounds of `clamp(min, max)`, either given by position or keyword, or left out:
        C++ takes both, as optional Scalars (std::nullopt for a missing one or None, as torch's
        Python binding passes it); a symbolic number is a Scalar holding it, as in Python."""
        bounds = _bind(("min", "max"), args, kwargs, 0,
                       "clamp with arguments other than the numbers min and max")
        given = {key: self.expr(v) for key, v in bounds.items()}
        if any(kind == T for _, kind in given.values()):
            # Tensor bounds, elementwise: the overload of optional Tensors
            codes = []
            for key in ("min", "max"):
                code, kind = given.get(key, ("", NONE))
                if kind not in (T, NONE):
                    raise NotCpp(f"clamp with a Tensor and {_a(kind)} as bounds")
                codes.append(code if kind == T else "::std::optional<at::Tensor>()")
            return ", ".join(codes)
        codes = []
        for key in ("min", "max"):
            if key not in bounds:
                codes.append("::std::nullopt")
                continue
            code, kind = given[key]
            if kind == NONE:
                codes.append("::std::nullopt")
            elif kind in NUMBER:
                codes.append(code)
            elif kind in (SYMINT, SYMFLOAT):
                codes.append(f"at::Scalar({code})")
            else:
                raise NotCpp(f"clamp with {_a(kind)} as {key}")
        if codes == ["::std::nullopt"] * 2:
            raise NotCpp("clamp without bounds")
        return ", ".join(codes)

    def _new_tensor(self, oc: str, name: str, args: tuple[F.Expr, ...],
                    kwargs: tuple[tuple[str, F.Expr], ...]) -> str:
        """`t.new_zeros(size)` (new_empty, new_ones; new_full with a fill value), and a `dtype=`:
        Tensor's own methods, which take the dtype and device of `t` as Python's do, C++ merging
        in the options given."""
        params = ("size", "fill_value") if name == "new_full" else ("size",)
        given, named = list(args), dict(kwargs)
        given += [named.pop(key) for key in params[len(given):] if key in named]
        dtype = named.pop("dtype", None)
        if len(given) != len(params) or named:
            raise NotCpp(f".{name} with arguments other than " + " and ".join(params) +
                         " (and dtype=)")
        sc, sk = self.expr(given[0])
        if sk == SIZES:
            call = f"{oc}.{name}_symint({sc}"
        elif sk == "int[]":
            call = f"{oc}.{name}(at::IntArrayRef({sc})"
        else:
            raise NotCpp(f".{name} of {_a(sk)}")
        if name == "new_full":
            fc, fk = self.expr(given[1])
            if fk in (SYMINT, SYMFLOAT):
                fc = f"at::Scalar({fc})"
            elif fk not in NUMBER:
                raise NotCpp(f".new_full with {_a(fk)} as fill value")
            call += f", {fc}"
        if dtype is not None:
            dc, dk = self.expr(dtype)
            if dk != DTYPE:
                raise NotCpp(f".{name} with {_a(dk)} as dtype")
            call += f", at::TensorOptions().dtype({dc})"
        return call + ")"

    def _listcomp(self, e: F.ListComp) -> tuple[str, str]:
        it = e.iterable
        builtin = it.func.name if isinstance(it, F.Call) and \
            isinstance(it.func, F.PyBuiltinRef) and not it.kwargs else None
        saved = dict(self.locals)
        lines = []
        # per name: its local and kind, and the C++ reading it in the loop's body
        bound: list[tuple[str, str, str]] = []
        if builtin == "range":
            # range(stop), range(start, stop) of ints; a SymInt bound is guarded on, as Python's
            # range() does (torch.compile specializes it)
            bounds = [self.expr(a) for a in it.args]
            if len(bounds) not in (1, 2) or any(k not in (INT, SYMINT) for _, k in bounds):
                raise NotCpp("range() other than of one or two integers")
            if len(e.names) != 1:
                raise NotCpp("a comprehension unpacking range()")
            (start, start_kind), (stop, stop_kind) = [("0", INT)] * (len(bounds) == 1) + bounds
            start = _guarded(start) if start_kind == SYMINT else start
            i = self.fresh(e.names[0])
            self.locals[e.names[0]] = i
            self.kinds["$" + e.names[0]] = INT
            if stop_kind == SYMINT:     # guarded once, not at each step
                stop = _guarded(stop)
                end = self.fresh("end")
                header = f"for (int64_t {i} = {start}, {end} = {stop}; {i} < {end}; ++{i}) {{"
            else:
                header = f"for (int64_t {i} = {start}; {i} < {stop}; ++{i}) {{"
        else:
            enumerated = builtin == "enumerate"
            start = None
            if enumerated:
                if len(it.args) == 2:
                    start, sk = self.expr(it.args[1])
                    if sk != INT:
                        raise NotCpp(f"enumerate() starting at {_a(sk)}")
                elif len(it.args) != 1:
                    raise NotCpp("enumerate() other than of one sequence and a start")
                seqs = [self.expr(it.args[0])]
            elif builtin == "zip":
                seqs = [self.expr(a) for a in it.args]
            else:
                seqs = [self.expr(it)]
            if len(seqs) + enumerated != len(e.names):
                raise NotCpp("a comprehension unpacking other than zip and enumerate")
            elem_kinds = []
            for _, k in seqs:
                if k == TL:
                    elem_kinds.append(T)
                elif k in LISTS:
                    elem_kinds.append(LISTS[k])
                elif k == SIZES:
                    elem_kinds.append(SYMINT)
                else:
                    raise NotCpp(f"a comprehension over {_a(k)}")
            i = self.fresh("i")
            seq_locals = [self.fresh("seq") for _ in seqs]
            for (code, _), local in zip(seqs, seq_locals):
                lines.append(f"const auto& {local} = {code};")
            n = ", ".join(f"{s}.size()" for s in seq_locals)
            size = f"std::min({{{n}}})" if len(seqs) > 1 else f"{seq_locals[0]}.size()"
            header = f"for (size_t {i} = 0; {i} < {size}; ++{i}) {{"
            index = f"static_cast<int64_t>({i})" + (f" + {start}" if start else "")
            reads = ([(INT, index)] if enumerated else []) + \
                [(k, f"{local}[{i}]") for k, local in zip(elem_kinds, seq_locals)]
            for name, (kind, read) in zip(e.names, reads):
                var = self.fresh(name)
                self.locals[name] = var
                self.kinds["$" + name] = kind
                bound.append((name, var, read))
        # A name the element and the condition never read gets no local (-Wunused-variable).
        read = {n.name for n in walk(e.elem, *([e.cond] if e.cond is not None else []))
                if isinstance(n, F.LoopVar)}
        body_decls = [f"const auto& {var} = {code};" for name, var, code in bound if name in read]
        ec, ek = self.expr(e.elem)
        elem_type = {T: "at::Tensor", NONE: "at::Tensor", INT: "int64_t",
                     SYMINT: "c10::SymInt"}.get(ek)
        if elem_type is None:
            raise NotCpp(f"a comprehension of {_a(ek)}")
        cond = None
        if e.cond is not None:
            cond, ck = self.expr(e.cond)
            if ck != BOOL:
                raise NotCpp("a comprehension condition that is not a bool")
        self.locals = saved
        out = self.fresh("out")
        inner = [*body_decls]
        push = f"{out}.push_back({ec});"
        inner += [f"if ({cond}) {{", f"  {push}", "}"] if cond else [push]
        reserve = "" if builtin == "range" else f"\n  {out}.reserve({size});"
        text = ("[&] {\n" + "".join("  " + x + "\n" for x in lines)
                + f"  std::vector<{elem_type}> {out};{reserve}\n  {header}\n"
                + "\n".join("    " + x for x in inner) + f"\n  }}\n  return {out};\n}}()")
        return text, {INT: "int[]", SYMINT: SIZES}.get(ek, TL)


def _function_stem(op: Op) -> str:
    """The op's name in the names of the functions generated for it; `__` before the overload:
    op `a_b` and op `a.b` get different names."""
    return f"{op.name.name}{'__' + op.name.overload if op.name.overload else ''}"


def kernel_name(op: Op) -> str:
    """The op's Autograd kernel function."""
    return f"{_function_stem(op)}_autograd"


def view_kernel_name(op: Op) -> str:
    """The ADInplaceOrView kernel of a mutating op (Note [ADInplaceOrView kernels])."""
    return f"{_function_stem(op)}_inplace_or_view"


def _tensors(op: Op, n: int) -> bool:
    """Whether `op` returns `n` Tensors, some perhaps optional (causal-conv1d's backward gives
    `Tensor? dbias`, None without a bias)."""
    returns = op.schema.returns
    return len(returns) == n and all(strip_optional(r.type) == BaseType(BaseTy.Tensor)
                                     for r in returns)


def _whole_tuple(f: F.Formula, lib: OpLibrary) -> bool:
    """Whether formula `f`, for several inputs, is one call of a library op returning as many
    Tensors (`q, k, v: flash_backward(...)`)."""
    match f.expr:
        case F.Call(func=F.OpRef() as ref) if len(f.inputs) > 1:
            target = F.resolve(lib, ref)
            return target is not None and _tensors(target, len(f.inputs))
    return False


def _only_whole_tuples(d: F.Derivatives, ref: F.OpRef, target: Op) -> bool:
    """Whether every call of `ref` in the formulas is the whole of a formula `_whole_tuple`
    takes: a call whose Tensors the C++ translation takes apart there only."""
    whole = {id(f.expr) for f in d.formulas if isinstance(f.expr, F.Call) and f.expr.func == ref
             and _tensors(target, len(f.inputs))}
    calls = [n for f in d.formulas for n in walk(*f.exprs())
             if isinstance(n, F.Call) and n.func == ref]
    return bool(calls) and all(id(c) in whole for c in calls)


def handle_name(op: Op) -> str:
    """The function returning the typed dispatcher handle of a library op formulas call."""
    return f"opgen_{_function_stem(op)}_op"


def _arg_kind(t) -> str | None:
    """What a library op's parameter takes; an optional one what its value does (C++'s
    std::optional converts from it, and None is std::nullopt)."""
    base = strip_optional(t)
    if isinstance(t, OptionalType) and not (isinstance(base, BaseType) and base.name in (
            BaseTy.Tensor, BaseTy.int, BaseTy.SymInt, BaseTy.float, BaseTy.bool)):
        return None
    if isinstance(base, BaseType):
        return {BaseTy.Tensor: "T", BaseTy.float: "f", BaseTy.int: "i", BaseTy.bool: "b",
                BaseTy.Scalar: "n", BaseTy.SymInt: "si"}.get(base.name)
    return None


def _given(kind: str) -> str:
    """What a translated value of `kind` is, in a note."""
    return {SIZES: "sizes (a shape)", NONE: "None"}.get(kind) or _a(kind)


def _converted(code: str, kind: str, spec: str) -> str:
    """An argument of `kind` as the C++ parameter of `spec` takes it."""
    if kind == INT and "n" in spec.split("|") and spec != "n":
        return f"at::Scalar({code})"
    if kind in (FLT, BOOL, SYMINT, SYMFLOAT) and spec == "T|n":
        return f"at::Scalar({code})"
    if kind == "int[]" and spec in ("s", "d"):
        return f"at::IntArrayRef({code})"
    if kind == INT and spec == "d":
        return f"at::IntArrayRef({{{code}}})"
    if kind == INT and spec == "si":   # not a literal 0, which also converts to a Tensor
        return f"c10::SymInt({code})"
    return code


def _sym_sizes(code: str, kind: str) -> str:
    """A list of sizes as c10::SymInts (a list of ints converts)."""
    return f"c10::fromIntArrayRefSlow({code})" if kind == "int[]" else code


def _scalar(code: str, kind: str) -> str:
    """A number as the Scalar a tensor operation takes (a Tensor or Scalar as it is)."""
    return f"at::Scalar({code})" if kind in (INT, FLT, BOOL, SYMINT, SYMFLOAT) else code


def _sym_scalar(code: str, kind: str) -> str:
    """A symbolic number as a Scalar (other numbers convert to one as they are)."""
    return f"at::Scalar({code})" if kind in (SYMINT, SYMFLOAT) else code


def _symfloat(code: str, kind: str) -> str:
    """A number as a c10::SymFloat: arithmetic with a float or a true division of symbolic
    values (c10::SymInt's / truncates, and SymInt and SymFloat do not mix)."""
    return code if kind == SYMFLOAT else f"c10::SymFloat({code})"


def _symint(code: str, kind: str) -> str:
    """An int or SymInt as a c10::SymInt (an int meeting a SymInt in // or %)."""
    return code if kind == SYMINT else f"c10::SymInt({code})"


def _fits(kind: str, spec: str) -> bool:
    for s in spec.split("|"):
        if s == "T" and kind == T:
            return True
        if s == "n" and kind in NUMBER:
            return True
        if s == "n" and spec == "T|n" and kind in (SYMINT, SYMFLOAT):   # a Scalar parameter
            return True
        if s == "TL" and kind == TL:
            return True
        if s == "f" and kind in (FLT, INT):
            return True
        if s in ("i",) and kind == INT:
            return True
        if s == "si" and kind in (INT, SYMINT):
            return True
        if s == "b" and kind == BOOL:
            return True
        if s == "s" and kind in (SIZES, "int[]"):
            return True
        if s == "d" and kind in (INT, "int[]"):
            return True
        if s == "dtype" and kind == DTYPE:
            return True
    return False


def _guarded(code: str) -> str:
    """A SymInt's value as an int64_t, guarded on (a trace specializes it), where Python reads
    one as an int."""
    return f"{code}.guard_int(__FILE__, __LINE__)"


def _size_at(sizes: str, index: str) -> str:
    """Size `index` of a saved std::vector of sizes, wrapped as Python indexes a tuple (a 0-dim
    tensor has none: maybe_wrap_dim's default would read sizes[0] of it)."""
    n = f"static_cast<int64_t>({sizes}.size())"
    return f"{sizes}[c10::maybe_wrap_dim({index}, {n}, /*wrap_scalar=*/false)]"


def _fold(expr: str) -> str:
    """`0 + 1 + x` -> `1 + x`: offsets read as a person would write them."""
    parts = [p.strip() for p in expr.split(" + ")]
    number = sum(int(p) for p in parts if p.isdigit())
    rest = [p for p in parts if not p.isdigit()]
    if number or not rest:
        rest.append(str(number))
    return " + ".join(rest)


# --------------------------------------------------------------------------------------------------
# Rendering


def _tangent_test(schema, cname: dict[str, str]) -> str:
    """C++ testing whether a forward-mode tangent reaches a Tensor argument of `schema`."""
    return " || ".join(
        (f"torch::autograd::isFwGradDefinedTensorList({cname[a.name]})"
         if isinstance(strip_optional(a.type), ListType)
         else f"torch::autograd::isFwGradDefined({cname[a.name]})")
        for a in schema.arguments if is_tensor_like(a.type))


def kernel_context(p: Plan) -> dict:
    op = p.op
    sig = p.sig
    params = ", ".join(b.decl() for b in sig.arguments)
    args = ", ".join(b.name for b in sig.arguments)
    cname = {b.argument.name: b.name for b in sig.arguments}
    tensors = [cname[a.name] for a in op.schema.arguments if is_tensor_like(a.type)]
    fw = _tangent_test(op.schema, cname)
    body: list[str] = []
    for line in p.body:
        indent = line[: len(line) - len(line.lstrip())]
        body.extend((indent + part) if k else part for k, part in enumerate(line.split("\n")))
    results = [f"std::get<{i}>(opgen_result)" if p.returns_tuple else "opgen_result"
               for i in range(len(op.schema.returns))]
    return {
        "qualname": f"{op.namespace}::{op.name.name}",     # findSchemaOrThrow takes the overload apart
        "display": f"{op.namespace}::{impl_name(op)}",
        "schema": str(op.schema),
        "cls": p.cls,
        "kernel": p.kernel,
        "members": p.members,
        "releases": p.releases,
        "body": body,
        "returns": sig.returns.cpp(),
        "function_type": sig.function_type(),
        "params": params,
        "args": args,
        "tensors": ", ".join(tensors),
        "fw": fw,
        "name": op.name.name,
        "overload": op.name.overload or "",
        "history": [results[i] for i in p.diff_returns],
        "no_history": [results[i] for i in range(len(results)) if i not in p.diff_returns],
        "saved_results": [(m, results[i]) for m, i in p.saved_results],
        "impl_name": impl_name(op),
    }


# --------------------------------------------------------------------------------------------------
# Mutating ops

# Note [Autograd of mutating ops]
# An in-place op `f_` takes no formulas: beside a differentiable functional variant `f` (codegen.tags
# functional_variant), its Autograd kernel runs `f` (through its own autograd) and copies the
# result into `self`, as torchgen differentiates `mul_` with `mul`'s formulas; `self` is cloned
# first when `f`'s formulas save it (torchgen's `original_self`). So does an in-place op on a
# Tensor list, `f_(Tensor(a!)[] self, ...) -> ()` beside `f(Tensor[] self, ...) -> Tensor[]`
# (aten's `_foreach_mul_` with `_foreach_mul`'s formulas), element by element. Its out= variant
# raises aten's error when an input requires grad. Any other op writing to Tensor arguments (vLLM's
# `rms_norm(Tensor! result, Tensor input, ...) -> ()`, an in-place op without a differentiable
# `f`) has no gradient at all, and its Autograd kernel raises when grad mode is on and an argument
# requires grad, as aten's autograd_not_implemented_fallback does. Without these kernels torch's
# autograd fallback ran the kernel and recorded nothing: the gradient skipped the op, or was
# silently zero (torch.func.grad), or the written tensor kept its old history. With no gradient
# to record, all of them call the op below autograd and bump the mutated tensors' versions (what
# aten's ADInplaceOrView kernels do). The Tensors of a written `Tensor(a!)[][]` (apex's
# `tensor_lists`) count as written, flattened into one list (`opgen_flatten`). They are C++ here
# where the op's namespace builds a full-ABI library; else Python (codegen.dest.py_functionalize),
# which costs a Python call on every call.

# Note [ADInplaceOrView kernels]
# The same ops get an ADInplaceOrView kernel that runs the op below it and bumps the written
# tensors' versions, as aten's in-place and out= ops have. It runs where no Autograd kernel does:
# a normal tensor written inside inference mode (its version bumped, so a backward that saved it
# raises rather than reading the new values) and an inference tensor written outside it (an error,
# as aten gives). Autograd kernels call the op below ADInplaceOrView, so a write bumps once.


def refuses_gradient(lib: OpLibrary, op: Op) -> bool:
    """Whether `op` writes to Tensor arguments and nothing differentiates it: its Autograd kernel
    raises when an argument requires grad (Note [Autograd of mutating ops]). A composite op is
    differentiated through its decomposition; one without kernels has nothing to guard."""
    keys = {k for k, _ in op.dispatch}
    return (any(is_tensor_like(a.type) or is_tensor_list_list(a.type)
                for a in op.schema.mutable_arguments) and bool(keys)
            and DispatchKey.CompositeImplicitAutograd not in keys
            and through_functional(lib, op) is None)


def no_gradient_doc(op: Op) -> str:
    """What the generated Autograd kernel of an op that refuses_gradient says it does."""
    if shape_tag(op.schema) == "out":
        return "Under autograd: aten's error for out= with an input that requires grad"
    return ("Under autograd: an error when an argument requires grad, as the op writes to its "
            "arguments and has no derivatives")


def no_gradient_message(op: Op) -> str:
    """The run-time error of an op that refuses_gradient, naming it and what to do."""
    if shape_tag(op.schema) == "out":
        return (f"{op.name}: functions with out=... arguments don't support automatic "
                "differentiation, but one of the arguments requires grad.")
    written = _written_words(op)
    if shape_tag(op.schema) == "inplace":
        how = (f"declare its functional variant '{op.name.base}' with derivatives (this op then "
               "differentiates through it)")
    elif writes_its_list(op.schema):
        how = (f"declare its functional variant '{op.name.base}', returning the new "
               f"'{op.schema.positional[0].name}' as a Tensor[], with derivatives (this op then "
               "differentiates through it)")
    elif op.name.inplace and op.schema.positional and op.schema.positional[0].is_write and \
            without_alias(op.schema.positional[0].type) == BaseType(BaseTy.Tensor):
        # Named in-place, but not shaped so (`f_(Tensor(a!) self) -> ()`): no functional route.
        # (A written Tensor list returned would not be functionalizable.)
        how = (f"return what it writes (`-> Tensor(a!)`), so that it differentiates through its "
               f"functional variant '{op.name.base}' once that has derivatives")
    else:
        how = ("call instead an op that returns what this one writes and has derivatives "
               "(an op writing to its arguments takes none)")
    return (f"{op.name} writes to {written} and has no derivatives, but an argument requires "
            "grad (its gradient would be wrong): call it under torch.no_grad() or "
            "torch.inference_mode(), or pass tensors that do not require grad; to differentiate "
            f"it, {how}")


def _written_words(op: Op) -> str:
    """The Tensors `op` writes to, for a message: those it may be given as None (`Tensor(a!)?`)
    said to be written where given, since a call may pass None for them."""
    written = [a for a in op.schema.mutable_arguments
               if is_tensor_like(a.type) or is_tensor_list_list(a.type)]
    always = ", ".join(f"'{a.name}'" for a in written if not isinstance(a.type, OptionalType))
    maybe = ", ".join(f"'{a.name}'" for a in written if isinstance(a.type, OptionalType))
    if not maybe:
        return always
    return f"{always} (and {maybe} where given)" if always else f"{maybe} where given"


def no_forward_message(op: Op) -> str:
    """The run-time error of an op that refuses_gradient under forward-mode AD, where a tangent
    reaches it: below autograd, the tangents of what it writes would stay as they were."""
    return (f"{op.name} writes to its arguments and has no forward-mode derivative "
            "(torch.func.jvp, jacfwd and forward_ad are not supported): a tangent reached it")


def mutating_in_cpp(lib: OpLibrary, op: Op) -> bool:
    """Whether `op`'s Autograd kernel (Note [Autograd of mutating ops]) is generated C++."""
    return _mutating_in_cpp_but_for_names(lib, op) and _prefixed_argument(op) is None


def _mutating_in_cpp_but_for_names(lib: OpLibrary, op: Op) -> bool:
    return ((through_functional(lib, op) is not None or refuses_gradient(lib, op))
            and namespace_abi(lib, op.namespace) is None
            and file_setting(lib, op) != "python" and not _is_python(op)
            and not isinstance(cached_signature(op.schema), cpp.Unsupported))


def not_differentiable(op: Op) -> bool:
    """Whether `op` is a functional op with kernels, a Tensor argument and no derivatives: a
    backward through it raises (Note [C++ autograd])."""
    keys = {k for k, _ in op.dispatch}
    return (op.derivatives is None and bool(keys)
            and DispatchKey.CompositeImplicitAutograd not in keys
            and any(is_tensor_like(a.type) for a in op.schema.arguments)
            and not any(annotation_of(x.type) is not None
                        for x in (*op.schema.arguments, *op.schema.returns)))


def not_differentiable_in_cpp(lib: OpLibrary, op: Op) -> bool:
    """Whether `op` is `not_differentiable` and gets torch's not-implemented Autograd kernel in
    C++: a full-ABI op of C++ kernels whose file does not say `autograd: python`."""
    return (not_differentiable(op) and namespace_abi(lib, op.namespace) is None
            and file_setting(lib, op) != "python" and not _is_python(op))


def not_differentiable_in_python(lib: OpLibrary, op: Op) -> bool:
    """Whether `op` is `not_differentiable` and gets a Python Autograd kernel to the same effect:
    its kernels are Python, or its file says `autograd: python`. Not on the stable ABI, where
    each call would pay a Python call (torch's fallback stays)."""
    return (not_differentiable(op) and namespace_abi(lib, op.namespace) is None
            and (file_setting(lib, op) == "python" or _is_python(op)))


def saves_self(functional: Op) -> bool:
    """Whether the functional variant's formulas read its first input (so an in-place op
    clones it before the copy overwrites it)."""
    d = functional.derivatives
    first = functional.schema.positional[0].name
    if not isinstance(d, F.Derivatives):
        return True
    saved = F.saved(d, functional.schema)
    return first in saved.tensors or first in saved.tensor_lists


def _bump(name: str, t) -> str:
    """Bumping the version of the written argument `name` of type `t`."""
    if isinstance(t, OptionalType):
        return f"if ({name}.has_value()) {{ torch::autograd::impl::bump_version(*{name}); }}"
    if isinstance(t, ListType):
        inner = ("if (opgen_t.has_value()) { torch::autograd::impl::bump_version(*opgen_t); }"
                 if isinstance(t.elem, OptionalType)
                 else "torch::autograd::impl::bump_version(opgen_t);")
        # c10::List's elements are references to convert, not optionals.
        elem = "std::optional<at::Tensor>" if isinstance(t.elem, OptionalType) else "const auto&"
        return f"for ({elem} opgen_t : {name}) {{ {inner} }}"
    return f"torch::autograd::impl::bump_version({name});"


def mutating_context(lib: OpLibrary, op: Op) -> dict:
    through = through_functional(lib, op)
    kind, functional = through if through is not None else ("refuse", None)
    sig = cached_signature(op.schema)
    assert not isinstance(sig, cpp.Unsupported)
    cname = {b.argument.name: b.name for b in sig.arguments}
    schema = op.schema
    # Tensors in a list of lists (apex's `Tensor(b!)[][] tensor_lists`), flattened to one list
    # for the requires-grad and tangent tests and the version bumps.
    flat = {a.name: f"opgen_flat_{cname[a.name]}" for a in schema.arguments
            if is_tensor_list_list(a.type)}
    tensors = [flat.get(a.name, cname[a.name]) for a in schema.arguments
               if is_tensor_like(a.type) or a.name in flat]
    bumps = [_bump(cname[a.name], a.type) for a in schema.mutable_arguments
             if is_tensor_like(a.type)]
    bumps += [_bump(flat[a.name], TENSOR_LIST)
              for a in schema.mutable_arguments if a.name in flat]
    fw = " || ".join(filter(None, [_tangent_test(schema, cname), *(
        f"torch::autograd::isFwGradDefinedTensorList({f})" for f in flat.values())]))
    ctx = {
        "kind": kind,
        "flatten": [{"name": f, "arg": cname[a]} for a, f in flat.items()],
        "schema": str(schema),
        "qualname": f"{op.namespace}::{op.name.name}",
        "overload": op.name.overload or "",
        "impl_name": impl_name(op),
        "kernel": kernel_name(op),
        "view_kernel": view_kernel_name(op),
        "returns": sig.returns.cpp(),
        "function_type": sig.function_type(),
        "params": ", ".join(b.decl() for b in sig.arguments),
        "args": ", ".join(b.name for b in sig.arguments),
        "tensors": ", ".join(tensors),
        "fw": fw,
        "bumps": bumps,
    }
    if kind in ("inplace", "inplace_list"):
        assert functional is not None
        first = schema.positional[0].name
        self_ = cname[first]
        # The copy would overwrite what the functional variant's backward saved of `self`.
        if kind == "inplace":
            clone, into = f"{self_}.clone()", first
        else:
            clone = (f"[&] {{ std::vector<at::Tensor> opgen_v; opgen_v.reserve({self_}.size()); "
                     f"for (const at::Tensor& opgen_t : {self_}) "
                     "{ opgen_v.push_back(opgen_t.clone()); } return opgen_v; }()")
            into = f"each tensor of {first}"
        # (an in-place list op writes only `self`: it has no kwarg-only written argument)
        inputs = [a for a in schema.arguments if not (a.kwarg_only and a.is_write)]
        ctx.update(
            self=self_,
            doc=f"Under autograd: {functional.name}, which has the derivatives, copied into "
                f"{into}",
            functional=handle_name(functional),
            functional_args=", ".join(
                clone if a.name == first and saves_self(functional) else cname[a.name]
                for a in inputs))
    else:
        ctx.update(doc=no_gradient_doc(op), message=no_gradient_message(op),
                   no_forward=no_forward_message(op))
    return ctx


def generate(lib: OpLibrary, diags: Diagnostics, project: Project) -> dict[str, str]:
    """`<generated>/cpp/<ns>/autograd.cpp` for each namespace with a C++ Autograd kernel."""
    check_formulas(lib, diags)
    if diags.has_errors:
        return {}
    out: dict[str, str] = {}
    for ns in lib.namespaces:
        plans = [p for p in (plan(lib, op) for op in lib.in_namespace(ns)) if p is not None]
        mutating = [op for op in lib.in_namespace(ns) if mutating_in_cpp(lib, op)]
        none = [impl_name(op) for op in lib.in_namespace(ns) if not_differentiable_in_cpp(lib, op)]
        if not plans and not mutating and not none:
            continue
        sources = sorted({s.file.path for s in shards(lib)[ns]})
        called: dict[str, Op] = {}
        # The library ops formulas call, and the functional variants in-place ops run.
        throughs = [through_functional(lib, op) for op in mutating]
        for target in [t for p in plans for t in p.calls] + [
                t[1] for t in throughs if t is not None and t[0] != "out"]:
            called.setdefault(handle_name(target), target)
        handles = [{"name": name, "qualname": f"{t.namespace}::{t.name.name}",
                    "overload": t.name.overload or "",
                    "function_type": cached_signature(t.schema).function_type()}
                   for name, t in sorted(called.items())]
        out[autograd_path(project, ns)] = render(
            "cpp_autograd.cpp.j2", banner=banner("//", sources), ns=ns, handles=handles,
            ops=[kernel_context(p) for p in plans],
            helpers=sorted(set().union(*(p.helpers for p in plans))),
            mutating=[mutating_context(lib, op) for op in mutating], not_differentiable=none)
    return out


def paths(lib: OpLibrary, project: Project) -> dict[str, str]:
    """namespace -> its generated autograd source, for the namespaces that have one."""
    return {ns: autograd_path(project, ns) for ns in lib.namespaces
            if any(plan(lib, op) is not None or mutating_in_cpp(lib, op)
                   or not_differentiable_in_cpp(lib, op) for op in lib.in_namespace(ns))}

