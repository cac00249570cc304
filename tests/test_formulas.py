"""Derivative formulas (codegen/formulas.py): parsing and checking into IR, what is saved for
backward, the emitted Python, and the generated autograd run for real.

tests/golden/py/inputs/grads.yaml declares one op per formula feature with the kernels below,
loaded without C++ (`runtime.testing.load_python_library`): gradcheck (and gradgradcheck where
the formulas are differentiable) on every sample, plus checks of saved tensors, named and indexed
output gradients, non-differentiable outputs, Tensor[] inputs and double-backward errors.
"""

from __future__ import annotations

import ast

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from codegen import contract
from codegen import formulas as F
from codegen.dest.py_autograd import FormulaEmitter, Names
from codegen.dest.py_common import PLAIN
from codegen.diagnostics import Diagnostics, Loc
from codegen.load import load_library
from codegen.model import DerivativesSpec, Located, Op
from codegen.parse import parse_schema
from tests import scratch

OP_FILE = "tests/golden/py/inputs/grads.yaml"


# --------------------------------------------------------------------------------------------------
# Kernels of grads.yaml


def mul_add(a, b, *, alpha=1.0):
    return a * b + alpha * b


def expand_to(x, like):
    return x.expand(like.shape).clone()


def soft_limit(x, limit):
    return limit * torch.tanh(x / limit)


def doubled_up(x):
    return x.repeat_interleave(2)


def scale_all(xs, w):
    return [x * w for x in xs]


def times_x_backward(grad, x):
    return grad * x


def minmax(x, dim):
    return x.amin(dim), x.amax(dim)


def halves(x):
    h = x.size(0) // 2
    return x[:h].clone(), x[h:].clone()


def max_with_index(x, dim):
    values, indices = x.max(dim)
    return values, indices


def lincomb(xs, ws):
    out = xs[0] * ws[0]
    for x, w in zip(xs[1:], ws[1:]):
        out = out + x * w
    return out


def cube(x):
    return x ** 3


def square(x):
    return x * x


def square_backward(grad, x):
    return 2 * x * grad


def take_rows(x, order):
    return x.index_select(0, order)


def inverse_order(order):
    return torch.argsort(order)


def cubed_sum(x):
    return (x ** 3).sum(), 3 * x ** 2


def frozen(x):
    return x.clone()


def product(a, b):
    return a * b


def weighted(x, w=None):
    return x.clone() if w is None else x * w


def scaled(x, s):
    return x * s


# --------------------------------------------------------------------------------------------------
# The generated autograd, run


@pytest.fixture(scope="module")
def library(request, testing):
    return scratch.python_library(request, testing, OP_FILE)


def _ops(library) -> dict[str, Op]:
    return {op.name.name: op for op in library.ops}


GRADCHECKED = ["cubed_sum", "mul_add", "expand_to", "minmax", "halves", "max_with_index",
               "lincomb", "cube", "square", "product", "weighted", "scaled", "soft_limit", "doubled_up",
               "scale_all", "times_x_backward", "take_rows"]


@pytest.mark.parametrize("name", GRADCHECKED)
def test_gradients(library, name, testing):
    """gradcheck on every sample; gradgradcheck too where every library op a formula calls has
    derivatives, otherwise a second backward must fail naming the op."""
    cases = [c for c in library.cases() if c.op.name.name == name]
    assert cases
    for case in cases:
        assert testing.check_gradients(case)


def test_only_what_formulas_read_is_saved(library):
    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    y = torch.ops.gradtest.mul_add(a, b, alpha=0.5)
    assert len(y.grad_fn.saved_tensors) == 2
    # expand_to reads x's shape only, and `like` not at all.
    x = torch.randn(1, 4, requires_grad=True)
    z = torch.ops.gradtest.expand_to(x, torch.randn(3, 4))
    assert z.grad_fn.saved_tensors == ()
    z.sum().backward()
    assert torch.equal(x.grad, torch.full((1, 4), 3.0))


def test_saved_plan():
    schema = parse_schema("ex::f(Tensor a, Tensor b, Tensor[] c, float s) -> Tensor")
    d = _derivatives(schema, {"a": "unbroadcast(grad * s, a) + b.size(0) * b.dtype.itemsize",
                              "b": "grad * result", "c": "[grad for t in c]"})
    plan = F.saved(d, schema)
    assert plan == F.Saved(tensors=(), tensor_lists=("c",), meta=(("a", "shape"), ("b", "shape"),
                                                                  ("b", "dtype")),
                           values=("s",), results=(0,))


def test_a_return_named_like_a_formula_name_is_that_return():
    """A return called `result` (or `grads`) of an op with several is that return, as its other
    names are; the formula language's own meaning is for ops whose returns do not take it."""
    schema = parse_schema("ex::f(Tensor x) -> (Tensor result, Tensor grads)")
    d = _derivatives(schema, {"x": "grad_result + grad_grads * result * grads"})
    assert F.saved(d, schema).results == (0, 1)


def test_non_differentiable_output(library):
    x = torch.randn(4, 3, requires_grad=True)
    values, indices = torch.ops.gradtest.max_with_index(x, 0)
    assert values.requires_grad and not indices.requires_grad


def test_named_gradients_of_several_outputs(library):
    x = torch.randn(3, 5, requires_grad=True)
    lo, hi = torch.ops.gradtest.minmax(x, 1)
    (lo.sum() + 2 * hi.sum()).backward()
    expected = (x == x.amin(1, keepdim=True)) + 2 * (x == x.amax(1, keepdim=True))
    assert torch.equal(x.grad, expected.float())


def test_tensor_list_gradients(library):
    xs = [torch.randn(3, 2, requires_grad=True), torch.randn(2, requires_grad=True)]
    torch.ops.gradtest.lincomb(xs, [2.0, -0.5]).sum().backward()
    assert torch.equal(xs[0].grad, torch.full((3, 2), 2.0))
    assert torch.equal(xs[1].grad, torch.full((2,), -1.5))


def test_left_out_optional_input(library):
    """The dispatcher leaves out trailing defaults: backward must not index past them."""
    x = torch.randn(3, 4, requires_grad=True)
    torch.ops.gradtest.weighted(x).sum().backward()
    assert torch.equal(x.grad, torch.ones(3, 4))


def test_second_backward_names_the_first_order_only_op(library):
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(torch.ops.gradtest.square(x).sum(), x, create_graph=True)
    assert torch.allclose(g, 2 * x)
    with pytest.raises(RuntimeError, match="gradtest::square_backward, which has no derivatives"):
        torch.autograd.grad(g.sum(), x)
    # Without create_graph nothing is marked, and first-order gradients are plain tensors.
    (g1,) = torch.autograd.grad(torch.ops.gradtest.square(x).sum(), x)
    assert not g1.requires_grad


def test_second_backward_names_the_output_read_as_a_constant(library):
    """The formula reads `slope`, an output computed from x that autograd does not track: a
    second derivative through it was silently zero (gradgradcheck failed)."""
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    total, slope = torch.ops.gradtest.cubed_sum(x)
    assert not slope.requires_grad
    # The incoming gradient is differentiated too, as gradgradcheck does.
    seed = torch.ones((), dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(total, x, seed, create_graph=True)
    assert torch.allclose(g, 3 * x ** 2)
    with pytest.raises(RuntimeError, match=r"gradtest::cubed_sum's backward reads output 1 "
                       r"\('slope'\), which output_differentiability marks non-differentiable"):
        torch.autograd.grad(g.sum(), (x, seed), allow_unused=True)
    # and the contract (the op reference, bc-check) says so
    with scratch.in_repo():
        lib = load_library([OP_FILE])
    ops = {op.name.name: op for op in lib.ops}
    assert contract.double_backward(ops["cubed_sum"], lib) is False
    assert contract.double_backward(ops["product"], lib) is True


def test_a_callee_giving_indices_only_leaves_the_op_differentiable_twice(library):
    """inverse_order has no derivatives, but its fake rule gives an int64 output: nothing
    differentiates through it, so take_rows, whose formula calls it, was wrongly made
    differentiable once (a second backward raised naming it)."""
    x = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    order = torch.tensor([2, 0, 1])
    f = lambda t: torch.ops.gradtest.take_rows(t, order) ** 2
    assert torch.autograd.gradgradcheck(f, (x,))
    with scratch.in_repo():
        lib = load_library([OP_FILE])
    ops = {op.name.name: op for op in lib.ops}
    assert contract.double_backward(ops["take_rows"], lib) is True
    assert F.first_order_only(lib, ops["take_rows"]) == []


def test_an_op_without_derivatives_raises_at_backward(library):
    """square_backward (a Python kernel) has no derivatives: torch's fallback for custom ops only
    warned, and eager differentiated through the torch calls inside the kernel while compiled
    code gave no gradient. Now both raise, as torch's kernel for an aten op without a formula."""
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    g = torch.ones(5, dtype=torch.float64)
    out = torch.ops.gradtest.square_backward(g, x)
    assert out.requires_grad
    torch.testing.assert_close(out.detach(), 2 * x.detach())
    message = "derivative for gradtest::square_backward is not implemented"
    with pytest.raises(RuntimeError, match=message):
        out.sum().backward()
    torch._dynamo.reset()
    with pytest.raises(Exception, match=message):
        torch.compile(torch.ops.gradtest.square_backward, backend="aot_eager",
                      fullgraph=True)(g, x).sum().backward()
    # torch.func too (an autograd.Function applied from a kernel needs the plain apply)
    with pytest.raises(RuntimeError, match=message):
        torch.func.grad(lambda x: torch.ops.gradtest.square_backward(g, x).sum())(x.detach())
    with torch.no_grad():
        assert not torch.ops.gradtest.square_backward(g, x).requires_grad
    assert torch.ops.gradtest.square_backward(g, x.detach()).grad_fn is None


def test_double_backward_through_differentiable_formulas(library):
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(torch.ops.gradtest.cube(x).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    assert torch.allclose(gg, 6 * x)


def test_not_implemented_gradient(library):
    x = torch.randn(2, requires_grad=True)
    y = torch.ops.gradtest.frozen(x)
    with pytest.raises(NotImplementedError, match="gradtest::frozen is not implemented: frozen has "
                                                  "no gradient yet"):
        y.sum().backward()


def test_compiled_backward(library):
    """aot_autograd traces setup_context and backward: saved metadata, needs_input_grad, Tensor[]
    and library calls all work under torch.compile with dynamic shapes."""
    def f(a, b, xs):
        return (torch.ops.gradtest.mul_add(a, b) + torch.ops.gradtest.lincomb(xs, [1.0, 2.0])).sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
    for n in (3, 5):
        args = [torch.randn(n, 4, requires_grad=True), torch.randn(4, requires_grad=True),
                [torch.randn(n, 4, requires_grad=True), torch.randn(4, requires_grad=True)]]
        ref = [t.detach().clone().requires_grad_() for t in args[:2]] + \
            [[t.detach().clone().requires_grad_() for t in args[2]]]
        compiled(*args).backward()
        f(*ref).backward()
        for got, want in zip([*args[:2], *args[2]], [*ref[:2], *ref[2]]):
            torch.testing.assert_close(got.grad, want.grad)


# --------------------------------------------------------------------------------------------------
# Parsing and checking


def _derivatives(schema, entries: dict[str, str], od=None) -> F.Derivatives:
    d, diags = parse(schema, entries, od)
    assert d is not None, diags.render()
    return d


def parse(schema, entries: dict[str, str], od=None):
    diags = Diagnostics()
    formulas = []
    for i, (k, v) in enumerate(entries.items()):
        formulas.append((tuple(n.strip() for n in k.split(",")),
                         Located(v, Loc("t.yaml", i + 1, 1, len(v)),
                                 lambda o, n, line=i + 1: Loc("t.yaml", line, 1 + o, n))))
    spec = DerivativesSpec(tuple(formulas), od, Loc("t.yaml", 1, 1))
    return F.parse_derivatives(spec, schema, diags), diags


def test_names_resolve_to_inputs_outputs_and_grads():
    schema = parse_schema("ex::f(Tensor x, Tensor y) -> (Tensor a, Tensor b)")
    d = _derivatives(schema, {"x": "grad_a * b + grads[1]", "y": "non_differentiable"})
    [f] = d.formulas
    assert f.expr == F.BinOp(F.BinOpKind.add,
                             F.BinOp(F.BinOpKind.mul, F.GradRef(0), F.ResultRef(1)),
                             F.GradRef(1))
    assert d.non_differentiable == ("y",)
    assert d.output_differentiability == (True, True)


def test_library_calls_are_resolved_against_the_library():
    schema = parse_schema("ex::f(Tensor x) -> Tensor")
    d = _derivatives(schema, {"x": "f_backward(grad, x) + ex.g.alt(x)"})
    refs = F.library_calls(d)
    assert [(r.name, r.overload, r.bare) for r in refs] == [("f_backward", None, True),
                                                             ("g", "alt", False)]


def test_every_tensor_input_needs_a_formula():
    schema = parse_schema("ex::f(Tensor x, Tensor idx) -> Tensor")
    d, diags = parse(schema, {"x": "grad"})
    assert d is None
    assert [m.message for m in diags.items] == ["input 'idx' has no derivative formula"]


def test_no_differentiable_output_needs_no_formulas():
    # torch-harmonics' psi preprocessing: sorted indices and values, none with a gradient.
    schema = parse_schema("ex::sort_psi(Tensor ker, Tensor vals) -> (Tensor roff, Tensor vals_sorted)")
    d = _derivatives(schema, {}, (False, False))
    assert d.formulas == () and d.non_differentiable == ("ker", "vals")
    d, diags = parse(schema, {"vals": "grad_roff"}, (True, False))
    assert [m.message for m in diags.items] == ["input 'ker' has no derivative formula"]


# --------------------------------------------------------------------------------------------------
# The emitter prints what was parsed: Python re-parses it to the same tree


NAMES = ["x", "y", "grad"]
atoms = st.one_of(st.sampled_from(NAMES), st.sampled_from(["1", "2.5", "None", "True"]))


def _exprs():
    binops = ["+", "-", "*", "/", "//", "%", "**", "@", "==", "<", "and", "or", "is", "is not"]

    def extend(children):
        return st.one_of(
            st.tuples(children, st.sampled_from(binops), children).map(
                lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
            children.map(lambda c: f"-({c})"),
            children.map(lambda c: f"not ({c})"),
            st.tuples(children, children, children).map(
                lambda t: f"({t[0]}) if ({t[1]}) else ({t[2]})"),
            st.tuples(children, children).map(lambda t: f"torch.clamp({t[0]}, min={t[1]})"),
            children.map(lambda c: f"({c}).sum(dim=-1)[0, 1:]"),
            st.tuples(children, children).map(lambda t: f"[{t[0]}, ({t[1]},)]"),
        )
    return st.recursive(atoms, extend, max_leaves=8)


@given(_exprs())
def test_emitted_python_has_the_parsed_meaning(text):
    # `x` and `y` are numbers: conditions and `and`/`or`/`not` on them are fine, on `grad` not
    # (Note [Data-dependent conditions]).
    schema = parse_schema("ex::f(Tensor t, int x, float y) -> Tensor")
    d, diags = parse(schema, {"t": text})
    # `x is 1`: Python warns at compile time, so the checker refuses it (Note [Constant folding]).
    if d is None:
        assert all("with a literal" in m.message or "tensor values" in m.message
                   for m in diags.items), diags.render()
        assume(False)
    op = Op(schema=schema, loc=Loc("t.yaml", 1, 1))
    names = Names(inputs={"t": "t", "x": "x", "y": "y"}, meta=set(), grads=["grad"],
                  results=["result"], ops={})
    emitted = FormulaEmitter(op, names, set(), PLAIN).expr(d.formulas[0].expr)
    assert ast.dump(ast.parse(emitted, mode="eval")) == ast.dump(ast.parse(text, mode="eval"))


# --------------------------------------------------------------------------------------------------
# Hostile formulas: what a formula can name, literals, nesting


def _errors(text: str, schema: str = "ex::f(Tensor x, Tensor y, int n=1) -> Tensor") -> list[str]:
    d, diags = parse(parse_schema(schema), {"x": text, "y": "non_differentiable"})
    assert (d is None) == bool(diags.items)
    return [m.message for m in diags.items]


FLOAT_INDEX = "must be an integer, and this is a float: torch refuses it when the formula runs"
INDEX_SCHEMA = ("ex::f(Tensor x, Tensor y, int n=1, float r=0.5, float[] ws=[], float? m=None) "
                "-> Tensor")


@pytest.mark.parametrize("text,what", [
    ("grad[:x.size(0) / 2]", "a slice bound"),
    ("h = max(x.size(0), n) / 2; grad[:h]", "a slice bound"),
    ("grad[r]", "an index"),
    ("grad[::-float(n)]", "a slice bound"),
    # what tells a library op's parameter it is given a float tells an index too
    ("grad[:ws[0]]", "a slice bound"),
    ("grad[:abs(x.size(0) / 2)]", "a slice bound"),
    ("grad[:n * torch.pi]", "a slice bound"),
    ("grad[r if n > 0 else 0.5]", "an index"),
    # a float where an optional one is not None
    ("grad[:m]", "a slice bound"),
    ("grad[m] if m is not None else grad", "an index"),
    ("v = m; grad if v is None else grad[v:]", "a slice bound"),
    ("grad[:m] if m is None or n > 0 else grad", "a slice bound"),
])
def test_a_float_is_no_index(text, what):
    """Each raised a TypeError at backward."""
    assert _errors(text, INDEX_SCHEMA) == [f"{what} {FLOAT_INDEX}"]


@pytest.mark.parametrize("text", [
    "grad[:x.size(0) // 2] * x[int(r):] * x[y.long() / 2]",
    "grad[:m] if m is None else grad",    # None is a slice bound
    "grad if m is not None else grad[:m]",
    "v = m; grad[:v] if n > 0 and v is None else grad",
    "grad[:m] if not (m is not None or n > 0) else grad",
    "m is not None or grad[:m].sum() > 0",
    "grad[r if n > 0 else 1:]",           # may be an int
])
def test_what_may_be_an_integer_is_an_index(text):
    assert _errors(text, INDEX_SCHEMA) == []


NO_NOPE = "'torch.nope' does not exist"


@pytest.mark.parametrize("text,messages", [
    # a call's function and arguments, an operator's operands, a tuple's items
    ("torch.mul(grad.nosuch(), torch.nope(y))", ["torch.Tensor has no attribute 'nosuch'",
                                                 NO_NOPE]),
    ("torch.sum(grad, dim=torch.nope, dim=1)", [NO_NOPE, "keyword argument 'dim' given twice"]),
    ("grad.bogus + grad[r]", ["torch.Tensor has no attribute 'bogus'", f"an index {FLOAT_INDEX}"]),
    ("(grad[r], torch.nope(x))[0] == 0", [f"an index {FLOAT_INDEX}", NO_NOPE]),
    # each binding, its name and its value, and the expression
    ("a = torch.nope(x); b = grad[:r]; grad * a * b", [NO_NOPE, f"a slice bound {FLOAT_INDEX}"]),
    ("result = torch.nope(x); grad * result", [
        "'result' is a name of the formula language; a binding needs another", NO_NOPE]),
    # a conditional's branches, a slice's bounds, a comprehension's parts
    ("grad[r:m] if n > 0 else torch.nope(grad)", [f"a slice bound {FLOAT_INDEX}"] * 2 + [NO_NOPE]),
    ("sum([g.bogus for g in torch.nope(x)])", ["'bogus' is not an attribute a formula can use",
                                               NO_NOPE]),
])
def test_independent_mistakes_of_a_formula_are_all_reported(text, messages):
    assert sorted(_errors(text, INDEX_SCHEMA)) == sorted(messages)


@pytest.mark.parametrize("text,message", [
    # a binding whose value is refused is unknown where it is used: `a.size(0) / 2` may be fine
    ("a = torch.nope(x); grad * a.sum() * grad[:a.size(0) / 2]", NO_NOPE),
    # arguments out of place once, not once each
    ("torch.sum(dim=0, grad, 1)", "positional arguments go before keyword arguments"),
    # the binding meant where its name is used, not the output it would name
    ("result = x * 2; grad * result.sum()",
     "'result' is a name of the formula language; a binding needs another"),
])
def test_what_follows_from_a_mistake_is_not_reported(text, message):
    assert _errors(text, INDEX_SCHEMA) == [message]


@scratch.on_pinned_torch()
def test_the_recorded_vocabulary_is_the_installed_torchs():
    """codegen/torch_names.json is what `--refresh` writes for the pinned torch."""
    import json
    from importlib import resources

    recorded = json.loads(resources.files("codegen").joinpath(F.TORCH_NAMES_FILE).read_text())
    assert recorded == F.torch_names()


def test_the_vocabulary_has_no_escape_hatch():
    names = F.torch_names()
    for module, forbidden in [("torch", ["os", "sys", "ops", "classes", "load", "save", "hub",
                                         "jit", "from_file", "set_default_dtype", "_C",
                                         "default_generator"]),
                              ("torch.nn.functional", ["importlib", "np", "torch", "warnings"]),
                              ("torch.Tensor", ["_base", "__class__", "__reduce_ex__"])]:
        assert not set(forbidden) & set(names[module]), module
    assert {"where", "nn", "linalg", "float32", "pi", "Tensor"} <= set(names["torch"])
    assert "functional" in names["torch.nn"]


@pytest.mark.parametrize("text", [
    "torch.os.system('true')", "torch.__class__", "torch._C._get_tracing_state()",
    "torch.load('x')", "torch.ops.aten.mul(grad, y)", "torch.classes", "torch.where.__globals__",
    "grad.__class__", "grad.sum().__class__.__init__.__globals__", "n.bit_length()",
    "torch.nn.functional.importlib", "torch.nn", "torch", "abs.__call__(grad)", "unbroadcast",
    "torch.float32.is_floating_point",
])
def test_formulas_name_only_their_vocabulary(text):
    assert _errors(text)


@pytest.mark.parametrize("text", ["getattr(grad, '__class__')", "__import__('os')",
                                  "__builtins__", "eval('1')"])
def test_other_names_must_be_ops_of_the_library(tmp_path, capsys, text):
    from codegen.__main__ import main

    p = tmp_path / "ops.yaml"
    p.write_text(f"- func: ex::f(Tensor x) -> Tensor\n  derivatives:\n    x: \"{text}\"\n")
    assert main(["check", str(p)]) == 1
    assert "error: unknown name" in capsys.readouterr().err


def test_an_op_of_another_op_file_is_known_when_both_are_checked(tmp_path, capsys):
    """`check` of one op file does not know the ops of the library's other files: the error
    says so (it said only 'unknown'), and checking both passes."""
    from codegen.__main__ import main

    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("- func: ex::f(Tensor x) -> Tensor\n  derivatives:\n"
                 "    x: ex.f_backward(grad, x)\n"
                 "- func: ex::g(Tensor x) -> Tensor\n  derivatives:\n"
                 "    x: g_backward(grad, x)\n")
    b.write_text("- func: ex::f_backward(Tensor grad, Tensor x) -> Tensor\n"
                 "- func: ex::g_backward(Tensor grad, Tensor x) -> Tensor\n")
    assert main(["check", str(a)]) == 1
    hints = [line for line in capsys.readouterr().err.splitlines() if line.startswith("hint: ")]
    assert hints == [f"hint: ops of ex: f, g; {F._ELSEWHERE}", f"hint: {F._ELSEWHERE}"]
    assert main(["check", str(a), str(b)]) == 0


def test_the_vocabulary_covers_what_formulas_use():
    assert not _errors("torch.nn.functional.gelu(grad) * torch.finfo(x.dtype).eps "
                       "+ torch.Tensor.sum(grad) + grad.new_zeros(x.shape) * torch.pi")


@pytest.mark.parametrize("deepest,deeper", [
    ("-" * 98 + "grad", "-" * 99 + "grad"),
    (" + ".join(["grad"] * 99), " + ".join(["grad"] * 100)),
    ("torch.where(" * 97 + "grad" + ", grad, grad)" * 97,
     "torch.where(" * 98 + "grad" + ", grad, grad)" * 98),
    ("(grad * grad + grad)" * 1 + " * (grad + grad)" * 48, None),
])
def test_the_deepest_formulas_emit_python_that_compiles(deepest, deeper):
    schema = parse_schema("ex::f(Tensor x, Tensor y) -> Tensor")
    d, diags = parse(schema, {"x": deepest, "y": "non_differentiable"})
    assert d is not None, diags.render()
    op = Op(schema=schema, loc=Loc("t.yaml", 1, 1))
    names = Names(inputs={"x": "x", "y": "y"}, meta=set(), grads=["grad"], results=["result"],
                  ops={})
    compile(FormulaEmitter(op, names, set(), PLAIN).expr(d.formulas[0].expr), "<formula>", "eval")
    if deeper is not None:
        assert _errors(deeper) == ["formula: nested more than 100 levels deep"]


def test_derivatives_yaml_cpp_spellings_get_their_python_hint():
    """derivatives.yaml writes `self.sym_sizes()`, `self.scalar_type()` (C++); a formula is
    Python. The hint names the Python spelling (difflib said 'sum_to_size', 'storage_type')."""
    for text, hint in [("grad.expand(x.sym_sizes())", "write '.shape'"),
                       ("grad.to(x.scalar_type())", "write '.dtype'"),
                       ("grad / x.sym_numel()", "write '.numel()'")]:
        d, diags = parse(parse_schema("ex::f(Tensor x, Tensor y, int n=1) -> Tensor"),
                         {"x": text, "y": "non_differentiable"})
        assert d is None and [item.hint.split(": ", 1)[1] for item in diags.items] == \
            [hint + ("" if "dtype" in hint else " (sizes stay symbolic under torch.compile)")]


# --------------------------------------------------------------------------------------------------
# Conditions (Note [Data-dependent conditions])

CONDITIONS = "ex::f(Tensor x, Tensor y, Tensor? b, Tensor[] ts, int n=1, float[] ws=[]) -> Tensor"
DEPENDS = "depends on tensor values: neither torch.compile nor C++ autograd can branch on them"


def _condition_errors(text: str) -> list[str]:
    d, diags = parse(parse_schema(CONDITIONS), {"x": text, "y, b, ts": "non_differentiable"})
    assert (d is None) == bool(diags.items)
    return [m.message for m in diags.items]


@pytest.mark.parametrize("text,message", [
    ("grad if x.sum() > 0 else -grad", "this condition " + DEPENDS),
    ("grad if x.sum().item() > 0 else -grad", "this condition " + DEPENDS),
    ("grad if float(x.max()) else -grad", "this condition " + DEPENDS),
    ("grad if torch.equal(x, y) else -grad", "this condition " + DEPENDS),
    ("grad if x.any() else -grad", "this condition " + DEPENDS),
    ("grad if n > 0 and x.all() else -grad", "this condition " + DEPENDS),
    ("grad if not (x > 0).all() else -grad", "this condition " + DEPENDS),
    ("grad if (x if n else y) else -grad", "this condition " + DEPENDS),
    ("s = x.sum(); grad if s > 0 else -grad", "this condition " + DEPENDS),
    ("grad if b else -grad", "this condition " + DEPENDS),
    ("torch.stack([t for t in ts if t.sum() > 0]).sum(0)",
     "this comprehension condition " + DEPENDS),
    ("torch.stack([r for r in x if r.max() > 0]).sum(0)",
     "this comprehension condition " + DEPENDS),
    ("grad * (x > 0 or y > 0)", "the left operand of 'or' " + DEPENDS),
    ("grad * (not x)", "the operand of 'not' " + DEPENDS),
    ("max(grad, x)", "max() compares tensor values: neither torch.compile nor C++ autograd can "
                     "branch on them"),
    ("grad * min(ts)", "min() compares tensor values: neither torch.compile nor C++ autograd can "
                       "branch on them"),
])
def test_conditions_on_tensor_values_are_refused(text, message):
    """Each passed `check` before, then failed under torch.compile (GuardOnDataDependentSymNode)
    and kept the op off C++ autograd."""
    assert _condition_errors(text) == [message]


@pytest.mark.parametrize("text", [
    "grad if n > 0 else -grad",
    "grad if x.dim() == 2 and x.ndim > 1 else -grad",
    "grad if x.size(0) > 1 and x.shape[-1] > 1 and x.numel() else -grad",
    "grad if x.shape == y.shape and len(ts) > 1 and ts else -grad",
    "grad if x.dtype == torch.float64 and x.dtype.is_floating_point else -grad",
    "grad if x.is_complex() or torch.is_floating_point(x) else -grad",
    "grad if x.requires_grad and x.device.type == 'cpu' else -grad",
    "grad if torch.finfo(x.dtype).eps > 1e-10 else -grad",
    "grad if b is None else grad * b",
    "s = x.size(0); grad if s > 1 else -grad",
    "torch.stack([t for t, w in zip(ts, ws) if w != 0]).sum(0)",
    "torch.stack([t for i, t in enumerate(ts) if i > 0 and t.dim() > 0]).sum(0)",
    "grad * max(n, x.size(0)) * min(x.shape) * max(ws)",
    "torch.where(x > 0, grad, -grad)",
])
def test_conditions_on_sizes_dtypes_and_arguments_are_kept(text):
    assert _condition_errors(text) == []


# What a library op returns is known from its schema and fake rule once the library is loaded.
CALLED = """\
- func: ex::h(Tensor a) -> Tensor
  fake: like(a)
- func: ex::parts(Tensor a) -> Tensor[]
  fake: '[like(a), like(a)]'
- func: ex::stats(Tensor a) -> (Tensor, int, SymInt)
  fake: (like(a), a.size(0) * 2, dynamic())
- func: ex::numel_of(Tensor a, int k=1) -> int
  fake: n = a.numel(); n * k
- func: ex::nonzero_count(Tensor a) -> SymInt
  fake: k = dynamic(); k
- func: ex::bump_(Tensor(a!) a) -> ()
- func: ex::meta_count(Tensor a) -> int
  dispatch: {CPU: meta_count_cpu, Meta: meta_count_meta}
"""


def _library_condition_errors(tmp_path, text: str) -> list[str]:
    from codegen.load import load_library

    p = tmp_path / "ops.yaml"
    p.write_text("- func: ex::f(Tensor x, Tensor y, int n=1) -> Tensor\n  derivatives:\n"
                 f"    x: '{text}'\n    y: non_differentiable\n" + CALLED)
    diags = Diagnostics()
    assert F.check_library(load_library([str(p)]), diags) == (not diags.items)
    return [m.message for m in diags.items]


@pytest.mark.parametrize("text,message", [
    ("grad if ex.h(x).sum() > 0 else -grad", "this condition " + DEPENDS),
    ("grad if h(x).any() else -grad", "this condition " + DEPENDS),
    ("grad if ex.h.default(x) else -grad", "this condition " + DEPENDS),
    ("t = ex.h(x); grad if t.sum() > 0 else -grad", "this condition " + DEPENDS),
    ("torch.stack([p for p in ex.parts(x) if p.sum() > 0]).sum(0)",
     "this comprehension condition " + DEPENDS),
    ("grad if ex.stats(x)[0].max() > 0 else -grad", "this condition " + DEPENDS),
    ("grad if ex.stats(x)[2] > 0 else -grad", "this condition " + DEPENDS),
    ("grad if ex.nonzero_count(x) > 0 else -grad", "this condition " + DEPENDS),
    ("grad if ex.numel_of(x, int(y.sum())) > 0 else -grad", "this condition " + DEPENDS),
    ("grad * (ex.h(x) > 0 or y > 0)", "the left operand of 'or' " + DEPENDS),
    ("grad * max(ex.h(x), n)", "max() compares tensor values: neither torch.compile nor C++ "
                               "autograd can branch on them"),
])
def test_conditions_on_library_op_tensors_are_refused(tmp_path, text, message):
    """Each passed `check` (the call's kind was unknown when the op file was read) and then
    failed under torch.compile or C++ autograd."""
    assert _library_condition_errors(tmp_path, text) == [message]


@pytest.mark.parametrize("text", [
    "grad if ex.numel_of(x) > 1 and ex.numel_of(x, k=n) > 1 else -grad",
    "grad if ex.stats(x)[1] > 2 and ex.stats(x)[0].dim() > 1 else -grad",
    "grad if ex.h(x) is None or ex.bump_(y) is None else -grad",
    "grad if len(ex.parts(x)) > 1 else -grad",
    # a Meta kernel's int: what it computes is not known here
    "grad if ex.meta_count(x) > 0 else -grad",
    "torch.where(ex.h(x).sum() > 0, grad, -grad)",
])
def test_conditions_on_library_op_sizes_are_kept(tmp_path, text):
    assert _library_condition_errors(tmp_path, text) == []


# A backward op taking every kind of number and list of numbers, as torchvision's take sizes.
TAKES = """\
- func: ex::takes(Tensor grad, SymInt n=0, int k=0, float s=1.0, bool b=False, Scalar a=1, \
SymInt[] sizes=[], int[] dims=[], int[2] pair=1, int? maybe=None, SymInt[]? opt=None, \
str mode="x", ScalarType? dtype=None, Device? device=None, Layout? layout=None, \
MemoryFormat? mf=None, float[] fs=[], bool[] bs=[], ScalarType st=float32) -> Tensor
- func: ex::takes_list(Tensor[] ts) -> Tensor
"""


def _argument_errors(tmp_path, text: str) -> list[str]:
    from codegen.load import load_library

    p = tmp_path / "ops.yaml"
    p.write_text("- func: ex::f(Tensor x, Tensor y, int n=1, int[] dims=[0], Tensor? w=None, "
                 "Scalar alpha=1, float r=0.5, str how='a', ScalarType dt=float32, float[] xs=[], "
                 "int? mi=None, str? so=None, float[]? ys=None, ScalarType? od=None, "
                 "bool? bo=None, Scalar[]? ss=None) "
                 f"-> Tensor\n  derivatives:\n    x: '{text}'\n    y: non_differentiable\n"
                 "    w: non_differentiable\n" + TAKES)
    diags = Diagnostics()
    assert F.check_library(load_library([str(p)]), diags) == (not diags.items)
    return [m.message for m in diags.items]


@pytest.mark.parametrize("text,given", [
    ("ex.takes(grad, x.shape)", "argument 2 ('n') of ex::takes is a SymInt, but is given a shape"),
    ("ex.takes(grad, k=x.size())", "argument 'k' of ex::takes is an int, but is given a shape"),
    ("ex.takes(grad, s=x.shape[1:])", "argument 's' of ex::takes is a float, but is given a shape"),
    ("ex.takes(grad, b=(x.size(0), 2))", "argument 'b' of ex::takes is a bool, but is given a "
                                          "shape"),
    ("s = list(x.shape) + dims; ex.takes(grad, s)", "argument 2 ('n') of ex::takes is a SymInt, "
                                                   "but is given a shape"),
    ("ex.takes(grad, maybe=x.shape if n > 0 else y.shape)",
     "argument 'maybe' of ex::takes is an int?, but is given a shape"),
    ("ex.takes(grad, a=grad.sum())", "argument 'a' of ex::takes is a Scalar, but is given a "
                                     "Tensor"),
    ("ex.takes(grad, x.sum() * 2)", "argument 2 ('n') of ex::takes is a SymInt, but is given a "
                                    "Tensor"),
    ("ex.takes(grad, k=[grad, y])", "argument 'k' of ex::takes is an int, but is given a list of "
                                    "Tensors"),
    ("ex.takes(grad, sizes=x.size(0))", "argument 'sizes' of ex::takes is a SymInt[], but is "
                                        "given a number"),
    ("ex.takes(grad, dims=-n)", "argument 'dims' of ex::takes is an int[], but is given a number"),
    ("ex.takes(grad, opt=len(x.shape) // 2)", "argument 'opt' of ex::takes is a SymInt[]?, but "
                                              "is given a number"),
    ("ex.takes(grad, sizes=y)", "argument 'sizes' of ex::takes is a SymInt[], but is given a "
                                "Tensor"),
])
def test_library_op_parameters_refuse_what_they_cannot_take(tmp_path, text, given):
    """Each passed `check` and failed at backward: torch.ops refuses a shape for a number and a
    number for a list; a Tensor it reads as a number eagerly, which torch.compile and vmap
    cannot (test_torch_ops_reads_a_tensor_given_for_a_number_eagerly_only)."""
    (message,) = _argument_errors(tmp_path, text)
    assert message.startswith(given + ": "), message


@pytest.mark.parametrize("text,messages", [
    ("ex.takes(grad, k=0.5) * ex.takes(grad, n=x.shape)", [
        "argument 'k' of ex::takes is an int, but is given a float",
        "argument 'n' of ex::takes is a SymInt, but is given a shape"]),
    ("ex.takes(ex.takes(grad, k=0.5), n=x.shape)", [
        "argument 'k' of ex::takes is an int, but is given a float",
        "argument 'n' of ex::takes is a SymInt, but is given a shape"]),
    # a call that does not match its op returns what is unknown; the others are checked
    ("ex.takes(ex.nope(grad), k=0.5) + ex.takes(grad, kk=1)", [
        "the library has no op 'ex::nope'",
        "argument 'k' of ex::takes is an int, but is given a float",
        "ex::takes has no argument 'kk'"]),
    # one call's first wrong argument only: out of order, several are wrong at once
    ("ex.takes(grad, x.dtype, mode=n)", [
        "argument 2 ('n') of ex::takes is a SymInt, but is given a dtype"]),
])
def test_every_library_op_call_of_a_formula_is_checked(tmp_path, text, messages):
    got = _argument_errors(tmp_path, text)
    assert len(got) == len(messages) and all(m.startswith(w) for m, w in zip(sorted(got),
                                                                            sorted(messages))), got


@pytest.mark.parametrize("text", [
    "ex.takes(grad, x.size(0), x.shape[-1], x.numel() / 2, x.dim() > 1, n, x.shape, dims, n)",
    "ex.takes(grad, len(x.shape), x.ndim, n * 0.5, n == 1, x.size(1) // 2)",
    "ex.takes(grad, sizes=[x.size(0), 2], dims=list(x.shape[1:]), pair=x.size(0))",
    "ex.takes(grad, sizes=x.shape + x.shape, dims=[], pair=[n, n], maybe=None, opt=None)",
    "ex.takes(grad, maybe=x.size(0), opt=x.size(), sizes=x.shape * 2, dims=(n,))",
    "s = x.shape; m = s[0]; ex.takes(grad, m, sizes=s, s=float(y.sum()), a=y.sum().item())",
    # what cannot be told is left to torch.ops: a loop variable, a library op's int
    "sum([ex.takes(grad, i) for i in x.shape], torch.zeros_like(x))",
    "ex.takes(grad, sizes=[x.size(0), n] if n else [], k=grad.dtype == torch.float32)",
])
def test_library_op_parameters_take_numbers_and_shapes(tmp_path, text):
    assert _argument_errors(tmp_path, text) == []


def test_torch_ops_reads_a_tensor_given_for_a_number_eagerly_only():
    """Why `check` refuses a Tensor for a number parameter though torch.ops takes a one-element
    one eagerly: vmap (torch.func) cannot read it, nor can torch.compile."""
    lib = torch.library.Library("opgen_kinds_probe", "DEF")
    try:
        lib.define("f(Tensor x, float s) -> Tensor")
        lib.impl("f", lambda x, s: x * s, "CPU")
        op = torch.ops.opgen_kinds_probe.f
        assert op(torch.ones(2), torch.tensor(3.0)).tolist() == [3.0, 3.0]
        with pytest.raises(Exception):
            op(torch.ones(2), torch.ones(2))    # several elements
        with pytest.raises(Exception):
            torch.vmap(lambda x: op(x, x.sum()))(torch.ones(2, 3))
    finally:
        lib._destroy()


def test_sizes_and_shapes_passed_to_a_backward_op_run(tmp_path, monkeypatch):
    """The calls `check` keeps run: sizes one by one to SymInt parameters (as torchvision's
    _roi_align_backward takes them), a shape to a SymInt[] one, a number to a float one."""
    import textwrap

    from codegen import testing

    (tmp_path / "kinds_kernels.py").write_text(textwrap.dedent("""\
        def scale(x, s):
            return x * s

        def scale_backward(grad, batch, channels, sizes, s):
            assert (batch, channels) == (sizes[0], sizes[1]) and list(grad.shape) == list(sizes)
            return grad * s
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.yaml").write_text(textwrap.dedent("""\
        namespace: kindstest
        ops:
          - func: scale(Tensor x, float s) -> Tensor
            dispatch: {CompositeExplicitAutograd: "kinds_kernels:scale"}
            fake: like(x)
            derivatives:
              x: scale_backward(grad, x.size(0), x.shape[1], x.shape, s)
          - func: scale_backward(Tensor grad, SymInt batch, SymInt channels, SymInt[] sizes,
                                 float s) -> Tensor
            dispatch: {CompositeExplicitAutograd: "kinds_kernels:scale_backward"}
            fake: like(grad)
        """))
    lib = testing.load_python_library(["ops.yaml"])
    try:
        op = torch.ops.kindstest.scale
        x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x: op(x, 1.5), (x,))
        got = torch.func.grad(lambda x: op(x, 1.5).sum())(x.detach())
        torch.testing.assert_close(got, torch.full_like(x, 1.5))
    finally:
        lib.close()


@pytest.mark.parametrize("text,message", [
    # a float where torch.ops takes an integer, even a whole one (2.0)
    ("ex.takes(grad, x.size(0) / 2)", "argument 2 ('n') of ex::takes is a SymInt, but is given a "
     "float: torch.ops refuses a float for a SymInt at backward, even a whole one (2.0)"),
    ("ex.takes(grad, k=0.5)", "argument 'k' of ex::takes is an int, but is given a float: "
     "torch.ops refuses a float for an int at backward, even a whole one (2.0)"),
    ("ex.takes(grad, k=r)", "argument 'k' of ex::takes is an int, but is given a float: "
     "torch.ops refuses a float for an int at backward, even a whole one (2.0)"),
    ("ex.takes(grad, maybe=-(x.numel() * 0.5))", "argument 'maybe' of ex::takes is an int?, but is "
     "given a float: torch.ops refuses a float for an int at backward, even a whole one (2.0)"),
    ("ex.takes(grad, n=float(n) // 2 if n else torch.pi)", "argument 'n' of ex::takes is a "
     "SymInt, but is given a float: torch.ops refuses a float for a SymInt at backward, even a "
     "whole one (2.0)"),
    ("ex.takes(grad, pair=x.size(0) / 2)", "argument 'pair' of ex::takes is an int[2], but is "
     "given a float: torch.ops refuses a float for an int at backward, even a whole one (2.0)"),
    ("ex.takes(grad, dims=(1, n / 2))", "argument 'dims' of ex::takes is an int[], but its item "
     "at index 1 is a float: torch.ops refuses a float for an int at backward, even a whole one "
     "(2.0)"),
    ("ex.takes(grad, max(x.size(0), n) / 2)", "argument 2 ('n') of ex::takes is a SymInt, but is "
     "given a float: torch.ops refuses a float for a SymInt at backward, even a whole one (2.0)"),
    # a Scalar may hold a float
    ("ex.takes(grad, alpha)", "argument 2 ('n') of ex::takes is a SymInt, but is given a Scalar: "
     "a Scalar may hold a float, which torch.ops refuses for a SymInt at backward"),
    ("ex.takes(grad, sizes=[alpha * 2])", "argument 'sizes' of ex::takes is a SymInt[], but its "
     "item at index 0 is a Scalar: a Scalar may hold a float, which torch.ops refuses for a "
     "SymInt at backward"),
    # a float[] holds floats, even of whole numbers: torch.ops gives its kernel [2.0, 3.0]
    ("ex.takes(grad, sizes=xs)", "argument 'sizes' of ex::takes is a SymInt[], but is given a list "
     "of floats: torch.ops refuses a float for a SymInt at backward, even a whole one (2.0)"),
    ("s = list(xs[1:]); ex.takes(grad, dims=s + dims)", "argument 'dims' of ex::takes is an int[], "
     "but is given a list of floats: torch.ops refuses a float for an int at backward, even a "
     "whole one (2.0)"),
    ("ex.takes(grad, pair=xs * 2)", "argument 'pair' of ex::takes is an int[2], but is given a "
     "list of floats: torch.ops refuses a float for an int at backward, even a whole one (2.0)"),
    ("ex.takes(grad, xs[0])", "argument 2 ('n') of ex::takes is a SymInt, but is given a float: "
     "torch.ops refuses a float for a SymInt at backward, even a whole one (2.0)"),
    ("ex.takes(grad, k=xs)", "argument 'k' of ex::takes is an int, but is given a list of floats: "
     "a list is not one number"),
    # a list holding one float, however it is made
    ("v = [n, 0.5]; ex.takes(grad, dims=v)", "argument 'dims' of ex::takes is an int[], but is "
     "given a list of floats: torch.ops refuses a float for an int at backward, even a whole one "
     "(2.0)"),
    ("ex.takes(grad, sizes=[0.5] * n)", "argument 'sizes' of ex::takes is a SymInt[], but is given "
     "a list of floats: torch.ops refuses a float for a SymInt at backward, even a whole one (2.0)"),
    ("ex.takes(grad, dims=[v / 2 for v in dims])", "argument 'dims' of ex::takes is an int[], but "
     "is given a list of floats: torch.ops refuses a float for an int at backward, even a whole "
     "one (2.0)"),
    # a Scalar[]'s items may be floats
    ("ex.takes(grad, sizes=ss)", "argument 'sizes' of ex::takes is a SymInt[], but is given a list "
     "of Scalars: a Scalar may hold a float, which torch.ops refuses for a SymInt at backward"),
    ("ex.takes(grad, dims=list(ss[1:]) + dims)", "argument 'dims' of ex::takes is an int[], but is "
     "given a list of Scalars: a Scalar may hold a float, which torch.ops refuses for an int at "
     "backward"),
    ("ex.takes(grad, pair=[alpha, n])", "argument 'pair' of ex::takes is an int[2], but its item at "
     "index 0 is a Scalar: a Scalar may hold a float, which torch.ops refuses for an int at "
     "backward"),
    ("ex.takes(grad, k=ss[0])", "argument 'k' of ex::takes is an int, but is given a Scalar: a "
     "Scalar may hold a float, which torch.ops refuses for an int at backward"),
    ("ex.takes(grad, k=ss)", "argument 'k' of ex::takes is an int, but is given a list of Scalars: "
     "a list is not one number"),
])
def test_library_op_integer_parameters_refuse_floats(tmp_path, text, message):
    """Each passed `check` and failed in torch.ops at backward."""
    assert _argument_errors(tmp_path, text) == [message]


@pytest.mark.parametrize("text,message", [
    ("ex.takes(grad, dtype=2.0)", "argument 'dtype' of ex::takes is a ScalarType?, but is given a "
     "float: torch.ops refuses a float for a ScalarType at backward, even a whole one (2.0)"),
    ("ex.takes(grad, mode=n)", "argument 'mode' of ex::takes is a str, but is given a number: "
     "torch.ops refuses it at backward"),
    ("ex.takes(grad, mode=x.dtype)", "argument 'mode' of ex::takes is a str, but is given a "
     "dtype: torch.ops refuses it at backward"),
    ("ex.takes(grad, mode=x)", "argument 'mode' of ex::takes is a str, but is given a Tensor: "
     "torch.ops refuses it at backward"),
    ("ex.takes(grad, mode=x.shape)", "argument 'mode' of ex::takes is a str, but is given a "
     "shape: a list is not one value"),
    ("ex.takes(grad, k=how)", "argument 'k' of ex::takes is an int, but is given a string: "
     "torch.ops refuses it at backward"),
    ("ex.takes(grad, b=\"yes\")", "argument 'b' of ex::takes is a bool, but is given a string: "
     "torch.ops refuses it at backward"),
    ("ex.takes(grad, b=x > 0)", "argument 'b' of ex::takes is a bool, but is given a Tensor: "
     "torch.ops would read its value at backward, which neither torch.compile, vmap nor C++ "
     "autograd can, and no gradient flows through it"),
    ("ex.takes(grad, a=x.device)", "argument 'a' of ex::takes is a Scalar, but is given a "
     "device: torch.ops refuses it at backward"),
    ("ex.takes(grad, a=grad.sum())", "argument 'a' of ex::takes is a Scalar, but is given a "
     "Tensor: torch.ops refuses it at backward"),
    ("ex.takes(grad, n=x.dtype)", "argument 'n' of ex::takes is a SymInt, but is given a dtype: "
     "torch.ops refuses it at backward"),
    ("ex.takes(grad, s=dt)", "argument 's' of ex::takes is a float, but is given a dtype: "
     "torch.ops refuses it at backward"),
    ("ex.takes(grad, dtype=x.device)", "argument 'dtype' of ex::takes is a ScalarType?, but is "
     "given a device: torch.ops refuses it at backward"),
    ("ex.takes(grad, dtype=torch.strided)", "argument 'dtype' of ex::takes is a ScalarType?, but "
     "is given a layout: torch.ops refuses it at backward"),
    ("ex.takes(grad, device=0)", "argument 'device' of ex::takes is a Device?, but is given a "
     "number: torch.ops refuses it at backward"),
    ("ex.takes(grad, layout=torch.channels_last)", "argument 'layout' of ex::takes is a Layout?, "
     "but is given a memory format: torch.ops refuses it at backward"),
    ("ex.takes(grad, mf=x.layout)", "argument 'mf' of ex::takes is a MemoryFormat?, but is given "
     "a layout: torch.ops refuses it at backward"),
    ("ex.takes(grad, dims=[n, x.dtype])", "argument 'dims' of ex::takes is an int[], but its item "
     "at index 1 is a dtype: torch.ops refuses it at backward"),
    ("ex.takes(grad, fs=[0.5, \"a\"])", "argument 'fs' of ex::takes is a float[], but its item at "
     "index 1 is a string: torch.ops refuses it at backward"),
])
def test_library_op_parameters_refuse_values_of_other_types(tmp_path, text, message):
    """Each passed `check` and failed in torch.ops at backward
    (test_library_op_parameter_types_agree_with_torch)."""
    assert _argument_errors(tmp_path, text) == [message]


def test_keyword_errors_underline_what_is_wrong(tmp_path):
    """Of a torch function's call as of a library op's: an unknown or repeated keyword is
    underlined at its name, a value the parameter cannot take at the value."""
    from codegen.diagnostics import UserError
    from codegen.load import load_library

    formulas = {
        "torch.maximum(grad, other=0.5)": "0.5",
        "torch.sum(grad, dim=0, dim=1)": "dim",
        "ex.takes(grad, k=0.5)": "0.5",
        "ex.takes(grad, kk=1)": "kk",
        "ex.takes(grad, k=1, k=2)": "k",
        "ex.takes(grad, 1, n=2)": "n",
    }
    p = tmp_path / "ops.yaml"
    p.write_text("".join(f"- func: ex::f{i}(Tensor x) -> Tensor\n  derivatives:\n"
                         f"    x: '{text}'\n" for i, text in enumerate(formulas)) + TAKES)
    diags = Diagnostics()
    try:
        lib = load_library([str(p)])
    except UserError as e:
        diags, lib = e.diags, e.lib
    F.check_library(lib, diags)
    lines = p.read_text().splitlines()
    underlined = {lines[d.loc.line - 1].strip()[len("x: '"):-1]:
                  lines[d.loc.line - 1][d.loc.col - 1:d.loc.col - 1 + d.loc.length]
                  for d in diags.items}
    assert underlined == formulas, diags.render()


@pytest.mark.parametrize("text", [
    # sizes divided with // stay integers
    "ex.takes(grad, x.size(0) // 2, k=x.numel() // 2, sizes=[x.size(0) // 2, 2], pair=n // 2)",
    "h = x.size(-1) // 2; ex.takes(grad, h, dims=(h, 1), maybe=h)",
    # what torch.ops converts: an int or bool for any number, a float for a bool
    "ex.takes(grad, True, x.dim() > 1, x.size(0) / 2, r, a=r)",
    "ex.takes(grad, b=0.5, a=alpha, s=alpha, fs=[n, 0.5, True], bs=[1, 0.5], dims=[True, n])",
    "ex.takes(grad, n=int(alpha), k=int(x.size(0) / 2), dims=[int(r)])",
    # a float[] for a float[] or a bool[], its items for a float; converted for an int[]
    "ex.takes(grad, s=xs[-1], fs=xs + dims, bs=xs[:1], sizes=[int(v) for v in xs])",
    # a Scalar[] or a list of floats for a float[] or a bool[]; converted for an int[]
    "ex.takes(grad, s=ss[0], a=ss[0], fs=ss, bs=list(ss) + [0.5], dims=[int(v) for v in ss]) "
    "if ss is not None else grad",
    "ex.takes(grad, sizes=[x.size(i) // 2 for i in range(n)], fs=[v / 2 for v in dims], "
    "k=[n, 0.5][0 if n else 1])",
    # a dtype, layout or memory format for an int; an int for a dtype; a string for a device
    "ex.takes(grad, k=x.dtype, dtype=6, layout=0, mf=1)",
    "ex.takes(grad, k=torch.channels_last, maybe=x.layout)",
    "ex.takes(grad, mode=how, dtype=dt, device=x.device, layout=x.layout, "
    "mf=torch.contiguous_format)",
    "ex.takes(grad, mode=\"sum\", dtype=torch.float, device=\"cpu\", layout=torch.strided)",
    "ex.takes(grad, dtype=torch.promote_types(x.dtype, y.dtype), device=torch.device(\"cpu\"))",
    # either an int or a float: left to torch.ops
    "ex.takes(grad, n if n > 0 else 0.5, k=x.item(), maybe=2 ** n)",
])
def test_library_op_parameters_take_what_torch_converts(tmp_path, text):
    assert _argument_errors(tmp_path, text) == []


def test_library_op_parameter_types_agree_with_torch():
    """What `check` lets a library op's parameter take (formulas._refusal, _takes_none) is what
    torch.ops takes: a sample value of each form, None, and lists of sizes and of floats, given
    to a parameter of each type (optional ones too), and each as an item of each list type,
    pass torch.ops exactly where `check` lets them pass (a Scalar stands for the float it may
    hold)."""
    samples = {
        F.Form.NUMBER: [1, True], F.Form.FLOAT: [0.5, 2.0], F.Form.SCALAR: [2.5],
        F.Form.STRING: ["cpu"], F.Form.DTYPE: [torch.float32], F.Form.DEVICE: [torch.device("cpu")],
        F.Form.LAYOUT: [torch.strided], F.Form.MEMORY_FORMAT: [torch.contiguous_format],
        F.Form.SHAPE: [[1, 2], [True]], F.Form.FLOATS: [[0.5, 2.0], [3.0]],
        F.Form.SCALARS: [[2, 2.5]],
    }
    values = [t.value for t in F._TAKES] + [f"{t.value}[]" for t in F._ITEM_TAKES] + ["int[2]"]
    names = values + [f"{v}?" for v in values] + ["Tensor", "Tensor?", "Tensor[]", "Tensor?[]"]
    lib = torch.library.Library("opgen_types_probe", "DEF")
    try:
        for i, name in enumerate(names):
            lib.define(f"f{i}(Tensor x, {name} v) -> Tensor")
            lib.impl(f"f{i}", lambda x, v: x.clone(), "CompositeExplicitAutograd")

        def passes(i: int, value) -> bool:
            try:
                getattr(torch.ops.opgen_types_probe, f"f{i}")(torch.ones(1), value)
            except (RuntimeError, TypeError):
                return False
            return True

        disagree = []
        for i, name in enumerate(names):
            t = parse_schema(f"f(Tensor x, {name} v) -> Tensor").arguments[1].type
            elem = F.strip_optional(t).elem if isinstance(F.strip_optional(t), F.ListType) \
                else None
            given = [(None, F._takes_none(t))]
            if elem is not None:
                given.append(([None], F._takes_none(elem, element=True)))
            if not F.is_tensor_like(t):     # a Tensor parameter's own check is Kind.META's
                for form, forms_values in samples.items():
                    for v in forms_values:
                        given.append((v, F._refusal(t, form) is None))
                        if elem is not None and form in F._ONE_VALUE:
                            given.append(([v], F._refusal(elem, form, element=True) is None))
            for v, expected in given:
                if passes(i, v) != expected:
                    disagree.append((name, v, not expected))
        assert disagree == []
    finally:
        lib._destroy()


@pytest.mark.parametrize("text,message", [
    ("ex.takes(grad, None)", "argument 2 ('n') of ex::takes is a SymInt, but is given None: "
     "torch.ops refuses None for a SymInt at backward"),
    ("ex.takes_list(None)", "argument 1 ('ts') of ex::takes_list is a Tensor[], but is given None: "
     "torch.ops refuses None for a Tensor[] at backward"),
    ("ex.takes(grad, mode=None)", "argument 'mode' of ex::takes is a str, but is given None: "
     "torch.ops refuses None for a str at backward"),
    ("v = None if n > 0 else n; ex.takes(grad, k=v)", "argument 'k' of ex::takes is an int, but is "
     "given 'v', which may be None: torch.ops refuses None for an int at backward"),
    ("ex.takes(grad, s=None if n > 0 else 1.0)", "argument 's' of ex::takes is a float, but is "
     "given a value that may be None: torch.ops refuses None for a float at backward"),
    ("v = None if n > 0 else n; ex.takes(grad, k=v) if v is None else grad", "argument 'k' of "
     "ex::takes is an int, but is given 'v', which may be None: torch.ops refuses None for an int "
     "at backward"),
    ("ex.takes(grad, dims=[n, None])", "argument 'dims' of ex::takes is an int[], but its item at "
     "index 1 is None: torch.ops refuses None for an int at backward"),
    ("ex.takes(grad, dims=[n if n > 0 else None])", "argument 'dims' of ex::takes is an int[], "
     "but its item at index 0 is a value that may be None: torch.ops refuses None for an int at "
     "backward"),
    ("ex.takes_list([grad, None])", "argument 1 ('ts') of ex::takes_list is a Tensor[], but its "
     "item at index 1 is None: torch.ops refuses None for a Tensor at backward"),
    # an optional input may be None
    ("ex.takes(grad, k=mi)", "argument 'k' of ex::takes is an int, but is given 'mi', which may "
     "be None: torch.ops refuses None for an int at backward"),
    ("ex.takes(grad, mode=so)", "argument 'mode' of ex::takes is a str, but is given 'so', which "
     "may be None: torch.ops refuses None for a str at backward"),
    ("ex.takes(grad, fs=ys)", "argument 'fs' of ex::takes is a float[], but is given 'ys', which "
     "may be None: torch.ops refuses None for a float[] at backward"),
    ("ex.takes(grad, st=od)", "argument 'st' of ex::takes is a ScalarType, but is given 'od', "
     "which may be None: torch.ops refuses None for a ScalarType at backward"),
    ("v = mi; ex.takes(grad, k=v)", "argument 'k' of ex::takes is an int, but is given 'v', which "
     "may be None: torch.ops refuses None for an int at backward"),
    ("ex.takes(grad, s=mi if n > 0 else 1.0)", "argument 's' of ex::takes is a float, but is given "
     "a value that may be None: torch.ops refuses None for a float at backward"),
    ("ex.takes(grad, a=mi and 2)", "argument 'a' of ex::takes is a Scalar, but is given a value "
     "that may be None: torch.ops refuses None for a Scalar at backward"),
    ("ex.takes(grad, k=mi) if mi is None else grad", "argument 'k' of ex::takes is an int, but is "
     "given 'mi', which may be None: torch.ops refuses None for an int at backward"),
    ("has = mi is None; ex.takes(grad, k=mi) if has or n > 0 else grad", "argument 'k' of "
     "ex::takes is an int, but is given 'mi', which may be None: torch.ops refuses None for an "
     "int at backward"),
    ("ex.takes(grad, sizes=(mi,))", "argument 'sizes' of ex::takes is a SymInt[], but its item at "
     "index 0 is 'mi', which may be None: torch.ops refuses None for a SymInt at backward"),
    # what is not None is checked as a value of the optional's type is, first
    ("ex.takes(grad, sizes=ys)", "argument 'sizes' of ex::takes is a SymInt[], but is given a list "
     "of floats: torch.ops refuses a float for a SymInt at backward, even a whole one (2.0)"),
    ("ex.takes(grad, k=so)", "argument 'k' of ex::takes is an int, but is given a string: "
     "torch.ops refuses it at backward"),
    ("ex.takes(grad, mode=od)", "argument 'mode' of ex::takes is a str, but is given a dtype: "
     "torch.ops refuses it at backward"),
    ("ex.takes(grad, maybe=w)", "argument 'maybe' of ex::takes is an int?, but is given a Tensor: "
     "torch.ops would read its value at backward, which neither torch.compile, vmap nor C++ "
     "autograd can, and no gradient flows through it"),
])
def test_library_op_parameters_refuse_none(tmp_path, text, message):
    """Each passed `check` and failed in torch.ops at backward (given None, or the optional
    input given None): torch.ops takes None for an optional parameter, a bool and a Tensor only
    (test_library_op_parameter_types_agree_with_torch)."""
    assert _argument_errors(tmp_path, text) == [message]


@pytest.mark.parametrize("text", [
    # given where a condition around the call tells it is not None
    "v = None if n > 0 else n; ex.takes(grad, k=v) if v is not None else grad",
    "v = None if n > 0 else n; has = v is not None; ex.takes(grad, k=v) if has else grad",
    "v = None if n > 0 else n; [ex.takes(g, k=v) for g in [grad] if v is not None][0]",
    "ex.takes(grad, k=mi) if mi is not None else grad",
    "ex.takes(grad, k=mi, mode=so) if mi is not None and so is not None else grad",
    "grad if mi is None or not so is not None else ex.takes(grad, k=mi, mode=so)",
    "has = mi is not None; ex.takes(grad, k=mi) if has else grad",
    "[ex.takes(g, k=mi) for g in [grad] if mi is not None][0]",
    "ex.takes(grad, mode=so if so else \"x\", fs=ys or [], st=od if od is not None else dt)",
    "v = mi if mi is not None else 0; ex.takes(grad, k=v, n=mi or 0)",
    # optional parameters take None; a bool takes it (False), a Tensor too (an undefined one)
    "ex.takes(grad, maybe=None, opt=None, dtype=None, b=None, bs=[True, None])",
    "ex.takes(grad, maybe=mi, dtype=od, b=bo, bs=[bo, None], s=r)",
    "ex.takes(w, b=None)",
])
def test_library_op_parameters_take_none_where_torch_does(tmp_path, text):
    assert _argument_errors(tmp_path, text) == []


def test_library_op_parameters_given_what_torch_converts_run(tmp_path, monkeypatch):
    """The conversions `check` lets pass run at backward: a size divided with // to an int, a
    bool to an int, an int to a float and to a bool, a dtype to an int, an int to a dtype."""
    import textwrap

    from codegen import testing

    (tmp_path / "convert_kernels.py").write_text(textwrap.dedent("""\
        import torch

        def scale(x, s):
            return x * s

        def scale_backward(grad, half, flag, s, keep, code, dtype):
            assert (half, flag, s, keep) == (grad.size(0) // 2, 1, 3.0, True), (half, flag, s, keep)
            assert code == 7 and dtype == torch.float64, (code, dtype)  # float64 is dtype 7
            return grad * s
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.yaml").write_text(textwrap.dedent("""\
        namespace: convtest
        ops:
          - func: scale(Tensor x, float s) -> Tensor
            dispatch: {CompositeExplicitAutograd: "convert_kernels:scale"}
            fake: like(x)
            derivatives:
              x: scale_backward(grad, x.size(0) // 2, x.dim() > 1, 3, 1, x.dtype, 7)
          - func: scale_backward(Tensor grad, int half, int flag, float s, bool keep, int code,
                                 ScalarType dtype) -> Tensor
            dispatch: {CompositeExplicitAutograd: "convert_kernels:scale_backward"}
            fake: like(grad)
        """))
    lib = testing.load_python_library(["ops.yaml"])
    try:
        op = torch.ops.convtest.scale
        x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
        (got,) = torch.autograd.grad(op(x, 3.0).sum(), x)
        torch.testing.assert_close(got, torch.full_like(x, 3.0))
    finally:
        lib.close()


def test_library_op_given_optionals_where_torch_takes_them_runs(tmp_path, monkeypatch):
    """What `check` lets pass of optional inputs runs at backward: an `int?` given where a
    condition tells it is not None, a `bool?` given to a bool (None is False), and gradcheck
    agrees with both None and values."""
    import textwrap

    from codegen import testing

    (tmp_path / "opt_kernels.py").write_text(textwrap.dedent("""\
        def scale(x, k=None, flip=None):
            return x * (k if k is not None else 1) * (-1 if flip else 1)

        def scale_backward(grad, k, flip):
            assert type(k) is int and type(flip) is bool, (k, flip)
            return grad * k * (-1 if flip else 1)
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.yaml").write_text(textwrap.dedent("""\
        namespace: opttest
        ops:
          - func: scale(Tensor x, int? k=None, bool? flip=None) -> Tensor
            dispatch: {CompositeExplicitAutograd: "opt_kernels:scale"}
            fake: like(x)
            derivatives:
              x: "scale_backward(grad, k, flip) if k is not None else scale_backward(grad, 1, flip)"
          - func: scale_backward(Tensor grad, int k, bool flip) -> Tensor
            dispatch: {CompositeExplicitAutograd: "opt_kernels:scale_backward"}
            fake: like(grad)
        """))
    lib = testing.load_python_library(["ops.yaml"])
    try:
        op = torch.ops.opttest.scale
        x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
        for k, flip in [(None, None), (3, True), (2, None)]:
            assert torch.autograd.gradcheck(lambda x: op(x, k, flip), (x,))
    finally:
        lib.close()


@pytest.mark.parametrize("nest", [
    lambda d, v: "-" * d + v,
    lambda d, v: "abs(" * d + v + ")" * d,
    lambda d, v: "[" * d + v + "]" * d + "[0]" * d,
    lambda d, v: "list(" * d + "[" + v + "]" + ")" * d + "[0]",
], ids=["neg", "abs", "list-literal", "list-call"])
def test_nesting_costs_linear_time(monkeypatch, nest):
    """Each level of a nested unary op or list asked its operand's form twice: 20 levels of
    unary minus took 13 s to check. Counted, not timed."""
    calls = 0
    form = F._Kinds.form

    def counted(self, e):
        nonlocal calls
        calls += 1
        return form(self, e)

    monkeypatch.setattr(F._Kinds, "form", counted)
    depth = 12
    assert _errors(f"grad[:{nest(depth, 'n')}]", INDEX_SCHEMA) == []
    assert calls <= 4 * depth


def test_a_keyword_only_gradient_does_not_hide_the_other_mistakes():
    """A gradient given to a keyword-only Tensor is reported with the op's other mistakes in
    its derivatives (here an output index out of range), not alone."""
    schema = parse_schema("ex::f(Tensor x, Tensor y, *, Tensor? m=None) -> Tensor")
    d, diags = parse(schema, {"x": "grads[3]", "y": "non_differentiable", "m": "grad"})
    assert d is None
    messages = [m.message for m in diags.items]
    assert len(messages) == 2, messages
    assert messages[0] == "keyword-only Tensor argument 'm' cannot have a gradient"
    assert "grads[3]" in messages[1], messages


@scratch.on_pinned_torch()
def test_the_recorded_signatures_are_the_installed_torchs():
    """codegen/torch_signatures.json is what `--refresh` writes for the pinned torch."""
    import json
    from importlib import resources

    from codegen import torch_signatures

    recorded = json.loads(resources.files("codegen").joinpath(
        torch_signatures.RECORD_FILE).read_text())
    assert recorded == torch_signatures.current(F.torch_names())


SIGNATURE_SCHEMA = "ex::f(Tensor x, Tensor y, int n=1) -> Tensor"
# Calls torch takes, each of them run below on tensors of the formula's shape.
TAKEN = [
    "grad.sum(0, keepdim=True).expand_as(x)",
    "grad.sum(dim=(0,), keepdim=True, dtype=x.dtype).expand_as(x)",
    "torch.where(x > 0, grad, torch.zeros_like(grad))",
    "torch.where(x > 0, grad, 0.0)",
    "grad.view(-1).view(x.shape)",
    "grad.reshape(x.size(0), -1)",
    "grad.permute(1, 0).t().contiguous()",
    "grad.transpose(0, 1).transpose(dim0=0, dim1=1)",
    "grad.expand(x.shape) * y.mean(dim=0, keepdim=True)",
    "torch.cat([grad, grad], dim=0)[:x.size(0)]",
    "grad.to(x.dtype) * x.new_ones(x.shape)",
    "grad.to(dtype=x.dtype, copy=True)",
    "torch.nn.functional.softmax(x, dim=-1) * grad",
    "torch.nn.functional.pad(grad, (0, 0))",
    "torch.nn.functional.gelu(x, approximate='tanh') * grad",
    "torch.nn.functional.linear(grad, y).sum() * x",
    "torch.clamp(grad, min=-1.0, max=1.0)",
    "grad.clamp(max=1.0)",
    "grad.masked_fill(x < 0, 0.0)",
    "torch.zeros(x.shape, dtype=x.dtype) + grad",
    "torch.zeros(3, 4, dtype=x.dtype) + grad",
    "grad * x.norm(p=2, dim=-1, keepdim=True)",
    "torch.einsum('ij,ij->ij', grad, y)",
    "grad.split(2, dim=1)[0].sum() * x",
    "grad.new_zeros(x.shape).index_add(0, torch.arange(3), grad)",
    "torch.stack([grad, y], 0).sum(0)",
    "torch.ones_like(x, memory_format=torch.preserve_format) * grad",
    "grad.roll(1, 0) + grad.roll(shifts=1, dims=0)",
    "grad.cumsum(0).flip(0)",
    "grad.flatten().unflatten(0, (x.size(0), -1))",
    "grad.size(0) * grad + grad.size(dim=1)",
    "grad.repeat(1, 1)",
]


@pytest.mark.parametrize("text", TAKEN)
def test_a_call_torch_takes_passes(text):
    assert _errors(text, SIGNATURE_SCHEMA) == []
    x, y, g = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    assert eval(text, {"torch": torch, "grad": g, "x": x, "y": y}).shape == x.shape


# Calls torch refuses at backward, with the error `check` gives them.
REFUSED = [
    ("grad.sum(dimm=0)", "Tensor.sum() has no argument 'dimm'"),
    ("grad.clamp(minimum=0)", "Tensor.clamp() has no argument 'minimum'"),
    ("torch.nn.functional.softmax(x, dims=0)",
     "torch.nn.functional.softmax() has no argument 'dims'"),
    ("torch.where(x > 0, grad)", "no signature of torch.where() takes 2 positional arguments"),
    ("grad.masked_fill(x < 0, 0, 1)",
     "no signature of Tensor.masked_fill() takes 3 positional arguments"),
    ("grad.transpose(0)", "no signature of Tensor.transpose() takes 1 positional argument"),
    ("grad.transpose(0, dim0=1)", "no signature of Tensor.transpose() takes these arguments"),
    ("torch.zeros_like(dtype=x.dtype)",
     "no signature of torch.zeros_like() takes these arguments"),
]


@pytest.mark.parametrize("text,message", REFUSED)
def test_a_call_torch_refuses_is_an_error(text, message):
    assert _errors(text, SIGNATURE_SCHEMA) == [message]
    x, y, g = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    with pytest.raises(TypeError):
        eval(text, {"torch": torch, "grad": g, "x": x, "y": y})


def test_a_newer_torch_decides_what_the_record_refuses(monkeypatch):
    """A keyword the pinned torch lacks may be a newer torch's: where the installed torch is
    another version, its own signatures decide."""
    from codegen import torch_signatures

    text = "grad.sum(0, keepdims=True)"
    assert _errors(text) == ["Tensor.sum() has no argument 'keepdims'"]
    monkeypatch.setattr(torch_signatures, "_installed_version", lambda: "9.0.0")
    monkeypatch.setattr(torch_signatures, "installed",
                        lambda module, name: ["dim keepdim? keepdims? * dtype?"])
    assert _errors(text) == []
