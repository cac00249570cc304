"""The `torch.Tag` names an op entry's `tags:` may use.

A static copy, so `check` needs no `import torch` (0.8 s); tests/test_load.py checks it against
`torch.Tag` of the installed torch. The C++ side spells each as `at::Tag::<name>`.
"""

from __future__ import annotations

from typing import Iterable

from codegen.model import (Argument, BaseTy, BaseType, DispatchKey, ListType, Op, OpLibrary,
                           is_tensor_like, iter_types, without_alias)
from codegen.shape import FakeRule, mutated_returns

TAGS: frozenset[str] = frozenset({
    "core",
    "cudagraph_unsafe",
    "data_dependent_output",
    "dynamic_output_shape",
    "flexible_layout",
    "generated",
    "inplace",
    "inplace_view",
    "maybe_aliasing_or_mutating",
    "needs_contiguous_strides",
    "needs_exact_strides",
    "needs_fixed_stride_order",
    "nondeterministic_bitwise",
    "nondeterministic_seeded",
    "out",
    "out_variant",
    "pointwise",
    "pt2_compliant_tag",
    "reduction",
    "view_copy",
})


# Note [Tags from the schema's shape]
#
# torch.compile functionalizes a custom op that mutates its inputs with auto_functionalize, which
# in torch 2.13 accepts returns aliasing the mutated inputs only from ops tagged `inplace` (the op
# mutates its first positional argument, a Tensor, and returns it) or `out` (the op writes
# keyword-only Tensor arguments and returns them, in order); see can_auto_functionalize in
# torch/_higher_order_ops/auto_functionalize.py. An op whose schema has exactly one of these shapes
# gets the tag (codegen.load), so it works under torch.compile with nothing else generated.
#
# Note [The out tag]
# An out= op whose library also declares its functional variant is not tagged `out`: it needs no
# tag, as the generated Functionalize kernel (codegen/dest/py_functionalize.py) calls the
# functional op and copies into `out`; and the tag breaks torch.compile of the functional op.
# Inductor lowers a custom op to the overload of its packet tagged `out` whose other arguments
# match (FallbackKernel.create, torch/_inductor/ir.py, via to_out_variant in
# torch/_library/_out_variant.py), and that lowering fails in every torch with the tag (2.13 to
# 2.15 at least; 2.12 has no `out` tag): with an argument left at its default the generated call
# passes it twice (`ns.op.out(x, 0.5, lambd=0.5, out=buf)`: "expected at most 3 argument(s)"),
# and under dynamic shapes 2.13 builds the out buffer's layout from SymInts (`LoweringException:
# AssertionError`). The choice depends on the library only, not on the torch version, so
# generated/ is the same on every machine. A tag the op file writes is kept.


# Note [Contiguous inputs for rule outputs]
# Every output a fake rule makes is a new contiguous tensor (codegen/shape.py; `empty_strided`
# gives its strides, fixed whatever the inputs' layout), and inductor asserts each custom op's
# output sizes and strides against its fake's. A kernel built from ATen ops, empty_like or
# TensorIterator lays its output out like its input, so on a non-contiguous
# input (a model passing `x.t()`) the compiled model failed at run time ("expected size 4==4,
# stride 1==3"). A functional op whose fake is a rule gets the `needs_contiguous_strides` tag:
# inductor then passes it contiguous inputs (a copy only where one is not), on which such a
# kernel returns contiguous outputs, as the rule says. An op file that writes a layout tag
# (LAYOUT_TAGS) keeps its own; a Python fake function says its strides itself and gets none.
LAYOUT_TAGS: frozenset[str] = frozenset({
    "needs_contiguous_strides", "needs_exact_strides", "needs_fixed_stride_order",
    "flexible_layout"})


def rule_needs_contiguous_inputs(schema, fake, tags) -> bool:
    """Whether an op gets `needs_contiguous_strides` (Note [Contiguous inputs for rule
    outputs]): its fake is a rule, it mutates nothing, it takes and returns Tensors, and its op
    file gives it no layout tag."""
    return (isinstance(fake, FakeRule) and not schema.mutable_arguments
            and not LAYOUT_TAGS & set(tags)
            and any(is_tensor_like(a.type) for a in schema.arguments)
            and any(is_tensor_like(r.type) for r in schema.returns))


def implied_tags(op: Op) -> set[str]:
    """The tags opgen adds from the op's schema and fake, whatever the op file writes."""
    out = {t for t in (shape_tag(op.schema),) if t is not None}
    if rule_needs_contiguous_inputs(op.schema, op.fake,
                                    tuple(t for t in op.tags if t != "needs_contiguous_strides")):
        out.add("needs_contiguous_strides")
    return out


# Note [Tags the stable ABI cannot register]
# A stable namespace registers its tags through StableLibrary::def (torch 2.12 on), which converts
# each at::Tag to the C shim's number with torch_tag_<name>() (FromImpl<Tag> in
# torch/csrc/stable/stableivalue_conversions.h). torch 2.13's conversion has every tag but
# `inplace` and `out`: registering either throws while the library loads, outside any try, and
# the process aborts ("Not yet supported Tag") at `import`. So a stable registration leaves them
# out, whatever min_torch; an op that needed one to be functionalized (Note [Tags from the
# schema's shape]) gets the `not-functionalizable` warning unless the library declares its
# functional variant.
STABLE_UNREGISTRABLE_TAGS: frozenset[str] = frozenset({"inplace", "out"})


def registered_tags(op: Op) -> tuple[str, ...]:
    """The tags torch registers for the op: all of them on the full ABI; on the stable ABI none
    before 2.12 and none of STABLE_UNREGISTRABLE_TAGS (Note [Tags the stable ABI cannot
    register])."""
    if op.abi is None:
        return op.tags
    if not op.abi.has("tags"):
        return ()
    return tuple(t for t in op.tags if t not in STABLE_UNREGISTRABLE_TAGS)


# The tags with which torch's auto_functionalize handles a mutating op (Note [Tags from the
# schema's shape]).
FUNCTIONALIZING_TAGS: frozenset[str] = frozenset({"inplace", "out"})


def auto_functionalized(op: Op) -> bool:
    """Whether torch functionalizes the op itself: it registers the `inplace` or `out` tag."""
    return not FUNCTIONALIZING_TAGS.isdisjoint(registered_tags(op))


def copies_back(schema) -> bool:
    """Whether a kernel can run the op's functional variant and copy its results into what the
    op mutates: every return is a mutated argument, and each of those a plain Tensor."""
    return all(isinstance(r, str) for r in mutated_returns(schema)) and all(
        without_alias(a.type) == BaseType(BaseTy.Tensor) for a in schema.mutable_arguments)


def effect_only(schema) -> bool:
    """Whether the op returns nothing and marks no argument as written: it is called for an
    effect its schema does not show (a file written, a log, a collective), or its kernel writes
    an argument the schema does not mark (the `no-effect` warning).

    Note [Ops called for an effect]
    torch.compile takes a call whose outputs nobody reads, of an op that mutates nothing, for dead
    code: aot_autograd and inductor drop it (torchaudio's `sox_io_save_audio_file(str path,
    Tensor tensor, ...) -> ()` then wrote no file). The generated registrations name such an op
    to `torch.fx.node.has_side_effect`, which both read (`torch._library.utils.is_impure`), so its
    calls are kept, in order; torch.export keeps them anyway. A write its kernel makes to an
    unmarked argument stays unknown to them: the `no-effect` warning."""
    return not schema.returns and not any(a.is_write for a in schema.arguments)


def shape_tag(schema) -> str | None:
    """`inplace` or `out` when the schema has that shape (Note [Tags from the schema's shape])."""
    def plain_tensor(t) -> bool:
        return without_alias(t) == BaseType(BaseTy.Tensor)

    mutated = [a for a in schema.arguments if a.is_write]
    rets = schema.returns
    if not mutated or not rets or not all(r.is_write and plain_tensor(r.type) for r in rets):
        return None
    first = schema.positional[0] if schema.positional else None
    if (mutated == [first] and plain_tensor(first.type) and len(rets) == 1
            and rets[0].annotation == first.annotation):
        return "inplace"
    if (all(a.kwarg_only and plain_tensor(a.type) for a in mutated) and len(rets) == len(mutated)
            and all(r.annotation == a.annotation for r, a in zip(rets, mutated))):
        return "out"
    return None


def functional_variant(lib: OpLibrary, op: Op) -> Op | None:
    """The functional op that `op` (in-place or out=) mutates its arguments with: same namespace
    and base name, the same argument types less the out= ones and less mutation annotations, and
    one return per mutated argument.

    Note [Functionalizing mutable ops]
    PyTorch functionalizes a custom op that mutates its inputs only when it returns nothing new
    that aliases them (auto_functionalize); `add_(Tensor(a!) self) -> Tensor(a!)` or an out= op is
    refused with "Found a custom (non-ATen) operator whose output has alias annotations". torchgen
    solves this for ATen by functionalizing `add_` as `add` followed by a copy into `self`; the
    generated `Functionalize` kernel does the same for this library's ops.
    """
    return functional_among(op, lib.named(op.namespace, op.name.base))


def functional_among(op: Op, overloads: Iterable[Op]) -> Op | None:
    """`functional_variant` of `op` found among `overloads`, the ops of its library named
    `<namespace>::<base name>` (others are passed over)."""
    written = len(op.schema.mutable_arguments)
    return next((o for o in _same_inputs(op, overloads)
                 if not o.schema.mutable_arguments and len(o.schema.returns) == written), None)


def _same_inputs(op: Op, overloads: Iterable[Op]):
    """The ops of `overloads` but `op`, of its namespace and base name, taking its arguments less
    the out= ones (as `_plain` compares them), in order."""
    wanted = tuple(_plain(a) for a in op.schema.arguments if not (a.kwarg_only and a.is_write))
    for other in overloads:
        if other is not op and other.namespace == op.namespace and \
                other.name.base == op.name.base and \
                tuple(_plain(a) for a in other.schema.arguments) == wanted:
            yield other


def near_variant(op: Op, overloads: Iterable[Op]) -> Op | None:
    """An op of `overloads` that takes `op`'s inputs as its functional variant would
    (`functional_among`) but is not one: it writes arguments itself, or returns another number
    of values. ExecuTorch's `sdpa_with_kv_cache(..., Tensor(a!) key_cache, ...) -> Tensor`
    beside its `.out` writes the caches too, so it cannot functionalize the `.out`."""
    return next(_same_inputs(op, overloads), None)


def through_functional(lib: OpLibrary, op: Op) -> tuple[str, Op] | None:
    """("inplace", "inplace_list" or "out", its functional variant) when `op`'s autograd goes
    through a differentiable functional variant (Note [Autograd of mutating ops] in
    codegen/dest/cpp_autograd.py); None otherwise."""
    return through_functional_among(op, lib.named(op.namespace, op.name.base))


def through_functional_among(op: Op, overloads: Iterable[Op]) -> tuple[str, Op] | None:
    """`through_functional` of `op`, its functional variant found among `overloads`."""
    kind = shape_tag(op.schema) or ("inplace_list" if writes_its_list(op.schema) else None)
    if kind is None:
        return None
    functional = functional_among(op, overloads)
    if functional is None:
        return None
    differentiable = functional.derivatives is not None or \
        DispatchKey.CompositeImplicitAutograd in {k for k, _ in functional.dispatch}
    if kind == "inplace_list":
        copies = without_alias(functional.schema.returns[0].type) == TENSOR_LIST
    else:
        copies = copies_back(op.schema)
    return (kind, functional) if copies and differentiable else None


TENSOR_LIST = ListType(BaseType(BaseTy.Tensor), None)


def writes_its_list(schema) -> bool:
    """`f_(Tensor(a!)[] self, ...) -> ()`: returns nothing and writes only its first argument, a
    Tensor list (aten's in-place foreach ops)."""
    first = schema.positional[0] if schema.positional else None
    return (first is not None and not schema.returns and first.is_write
            and without_alias(first.type) == TENSOR_LIST
            and [a.name for a in schema.mutable_arguments] == [first.name])


def _plain(a: Argument) -> tuple:
    """An argument's type without alias annotations, default and kind (names may differ: an
    in-place op's first argument is always `self`)."""
    return (without_alias(a.type), a.default, a.kwarg_only)


# Why torch.compile and torch.export cannot functionalize an op (`unfunctionalizable`); the
# `not-functionalizable` warning (codegen/dest/py_functionalize.py) says each in its words.
VIEW = "view"                   # returns a view of its input, mutating nothing
OTHER_RETURN = "other-return"   # mutates, returns something that is not a Tensor (a Tensor[])
STABLE_TAG = "stable-tag"       # its `inplace`/`out` tag cannot be registered (stable ABI)
NEW_VALUES = "new-values"       # returns what it mutates and new values
NO_COPY_BACK = "no-copy-back"   # has a functional variant, but mutates a list or an optional
NO_VARIANT = "no-variant"       # returns what it mutates, neither in-place nor out=, no variant
NESTED_WRITE = "nested-write"   # writes Tensors held deeper than a list (apex's Tensor(a!)[][])


def nested_write(op: Op) -> Argument | None:
    """The first argument `op` writes that holds Tensors deeper than a Tensor list
    (`Tensor(a!)[][]`): auto_functionalize takes written Tensor, Tensor?, Tensor[] and Tensor?[]
    only, so torch's FunctionalTensorMode refuses the op."""
    return next((a for a in op.schema.mutable_arguments if not is_tensor_like(a.type) and any(
        t == BaseType(BaseTy.Tensor) for t in iter_types(without_alias(a.type)))), None)


def only_decomposes(op: Op) -> bool:
    """Whether the op has no kernel to trace: none, or CompositeImplicitAutograd alone."""
    return not {k for k, _ in op.dispatch} - {DispatchKey.CompositeImplicitAutograd}


def unfunctionalizable(op: Op, overloads: Iterable[Op]) -> str | None:
    """Why torch.compile and torch.export cannot functionalize `op` (one of the kinds above), or
    None when they can, or when there is nothing to functionalize (no mutation, no view, or
    only a CompositeImplicitAutograd kernel). `overloads`: ops of its library, where its
    functional variant would be (those not named `<namespace>::<base name>` are passed over)."""
    schema = op.schema
    if only_decomposes(op):
        return None
    if not schema.mutable_arguments:
        # torch functionalizes aten's views with their view_copy and inverse; a custom op has
        # neither, so FunctionalTensorMode refuses it.
        return VIEW if any(r.annotation is not None for r in schema.returns) else None
    if nested_write(op) is not None:
        return NESTED_WRITE
    returns = mutated_returns(schema)
    if not any(isinstance(r, str) for r in returns):
        # auto_functionalize takes ops that return nothing or new Tensors only.
        if any(without_alias(r.type) != BaseType(BaseTy.Tensor) for r in schema.returns):
            return OTHER_RETURN
        return None
    functional = functional_among(op, overloads)
    if functional is not None and copies_back(schema):
        return None  # the generated Functionalize kernel
    if auto_functionalized(op):
        return None  # torch's auto_functionalize
    if not all(isinstance(r, str) for r in returns):
        return NEW_VALUES
    if functional is None and FUNCTIONALIZING_TAGS.intersection(op.tags):
        return STABLE_TAG  # Note [Tags the stable ABI cannot register]
    return NO_COPY_BACK if functional is not None else NO_VARIANT
