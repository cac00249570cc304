"""codegen.dest.py_autograd's units: the flat layout of an autograd.Function's inputs and outputs
(FlatFunction), read back by evaluating the Python it spells on concrete lists. The generated
text as a whole is pinned by the golden files (tests/test_py_reg.py)."""

from __future__ import annotations

import itertools
import re
import textwrap
from pathlib import Path

import pytest

from codegen import parse_schema
from codegen.dest.py_autograd import FlatFunction


def _python_library(tmp_path, monkeypatch, module: str, kernels: str, ops: str):
    """The op file `ops` loaded by codegen.testing.load_python_library (close it), its Python
    kernels in module `module` (`kernels`); both written to `tmp_path`, the working directory."""

    from codegen import testing

    (tmp_path / f"{module}.py").write_text(textwrap.dedent(kernels))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.yaml").write_text(textwrap.dedent(ops))
    return testing.load_python_library(["ops.yaml"])

SCHEMA = "ns::f(Tensor[] xs, Tensor w, Tensor[] ys, int n) -> (Tensor a, Tensor[] b, Tensor c)"


def flat_inputs(xs: list, w: str, ys: list, n: int) -> list:
    """What the Autograd kernel passes the Function: a slot per argument, then the elements."""
    return [len(xs), w, len(ys), n, *xs, *ys]


@pytest.mark.parametrize("n_xs, n_ys", list(itertools.product(range(3), range(3))))
def test_setup_context_finds_each_input(n_xs, n_ys):
    flat = FlatFunction(parse_schema(SCHEMA))
    xs = [f"x{i}" for i in range(n_xs)]
    ys = [f"y{i}" for i in range(n_ys)]
    inputs = flat_inputs(xs, "w", ys, 7)
    found = {name: eval(flat.source(name), {"inputs": inputs}) for name in ("xs", "w", "ys", "n")}
    assert found == {"xs": xs, "w": "w", "ys": ys, "n": 7}


@pytest.mark.parametrize("n_b", range(4))
def test_flat_outputs_are_regrouped(n_b):
    flat = FlatFunction(parse_schema(SCHEMA))
    assert (flat.at, flat.tail) == (1, 1)
    b = [f"b{i}" for i in range(n_b)]
    output = ["a", *b, "c"]
    got = [eval(flat.output(i), {"output": output}) for i in range(3)]
    assert got == ["a", b, "c"]


def test_needs_reads_each_inputs_gradient_flags():
    flat = FlatFunction(parse_schema(SCHEMA))
    needs = (False, False, False, False, False, True, False)    # 4 slots, 2 xs, 1 y
    env = {"needs": needs, "xs_len": 2, "ys_len": 1}
    assert {n: eval(flat.needs(n), env) for n in ("xs", "w", "ys")} == {
        "xs": True, "w": False, "ys": False}


@pytest.mark.parametrize("n_xs, n_ys", [(0, 2), (2, 0), (3, 1)])
def test_forward_splits_the_flat_elements(n_xs, n_ys):
    # forward(xs_len, w, ys_len, n, *flat): each list is its slice of `flat`.
    flat = FlatFunction(parse_schema(SCHEMA))
    assert flat.slot_names == ["xs_len", "w", "ys_len", "n"] and flat.flat == "flat"
    xs = [f"x{i}" for i in range(n_xs)]
    ys = [f"y{i}" for i in range(n_ys)]
    env = {"flat": (*xs, *ys), "xs_len": n_xs, "ys_len": n_ys}
    got = [list(eval(flat.list_slice("flat", k, lambda n: f"{n}_len", 0), env))
           for k in range(2)]
    assert got == [xs, ys]


def test_generated_locals_keep_their_names_beside_other_inputs():
    flat = FlatFunction(parse_schema("ns::g(Tensor self, Tensor[] grads) -> Tensor[]"))
    own = flat.own
    assert (own.ctx, own.needs, own.saved, own.grads, own.results, own.flat_grads, own.outputs) \
        == ("ctx", "needs", "saved", ["grad"], ["result"], "flat_grads", "outputs")
    assert own.grad_vars == {"self": "self_grad", "grads": "grads_grad"}
    assert own.lens == {"grads": "grads_len"}
    assert flat.flat == "grads"         # the only Tensor[] input is the flat tail itself


def test_generated_locals_move_off_the_inputs_names():
    """An input named like a local of the generated functions keeps its name (callers pass it by
    keyword); the local gets another, unlike every input's and every other local's."""
    schema = parse_schema("ns::g(Tensor ctx, Tensor needs, Tensor saved, Tensor result, "
                          "Tensor outputs, Tensor flat_grads, Tensor flat, Tensor[] xs, "
                          "Tensor xs_len, Tensor[] ys, Tensor ys_grad, Tensor grad) -> Tensor[]")
    flat = FlatFunction(schema)
    own = flat.own
    assert (own.ctx, own.needs, own.saved, own.grads, own.results, own.flat_grads, own.outputs,
            flat.flat) == ("ctx_", "needs_", "saved_", ["grad_"], ["result_"], "flat_grads_",
                           "outputs_", "flat_")
    assert own.lens == {"xs": "xs_len_", "ys": "ys_len"}
    assert own.grad_vars["ys"] == "ys_grad_" and own.grad_vars["ys_grad"] == "ys_grad_grad"
    assert flat.slot_names[7] == "xs_len_" and flat.slot_names[8] == "xs_len"
    generated = [own.ctx, own.needs, own.saved, *own.grads, *own.results, own.flat_grads,
                 own.outputs, flat.flat, *own.lens.values(), *own.grad_vars.values()]
    assert len(set(generated)) == len(generated)
    assert not set(generated) & {a.name for a in schema.arguments}


def test_values_named_like_ctx_attributes_differentiate(tmp_path, monkeypatch):
    """Non-Tensor inputs the formulas read are kept on autograd's ctx: one named like an attribute
    ctx has itself (`saved_tensors` is read-only; `needs_input_grad` would silently replace
    autograd's own) is kept under a fresh name, and the op differentiates through both paths."""

    import torch

    lib = _python_library(tmp_path, monkeypatch, "ctx_kernels", """\
        def scale(x, needs_input_grad, saved_tensors, name):
            return x * needs_input_grad * saved_tensors

        def scale_list(xs, needs_input_grad):
            return xs[0] * needs_input_grad
        """, """\
        namespace: ctxattr
        ops:
          - func: scale(Tensor x, float needs_input_grad, float saved_tensors, str name) -> Tensor
            dispatch: {CompositeExplicitAutograd: "ctx_kernels:scale"}
            fake: like(x)
            derivatives:
              x: "grad * needs_input_grad * saved_tensors if name == 'on' else grad * 0"
          - func: scale_list(Tensor[] xs, float needs_input_grad) -> Tensor
            dispatch: {CompositeExplicitAutograd: "ctx_kernels:scale_list"}
            fake: like(xs[0])
            derivatives:
              xs: "[grad * needs_input_grad] + [grad * 0 for _ in xs[1:]]"
        """)
    try:
        x = torch.randn(3, dtype=torch.double, requires_grad=True)
        assert torch.autograd.gradcheck(lambda t: torch.ops.ctxattr.scale(t, 2.0, 3.0, "on"), (x,))
        torch.ops.ctxattr.scale(x, 2.0, 3.0, "on").sum().backward()
        assert x.grad.tolist() == [6.0] * 3
        y = torch.randn(3, dtype=torch.double, requires_grad=True)
        torch.ops.ctxattr.scale_list([y, y.detach()], 5.0).sum().backward()
        assert y.grad.tolist() == [5.0] * 3
    finally:
        lib.close()


def test_inplace_op_differentiates_through_its_functional_variant(tmp_path, monkeypatch):
    """An in-place op gets no formulas of its own (they go on its functional variant): its
    generated Autograd kernel runs the functional op and copies into `self`, as torchgen
    differentiates `mul_` with `mul`'s formulas. Before, torch's autograd fallback ran the
    kernel and recorded nothing for it: the gradient skipped the op (silently wrong), eagerly
    and under torch.compile. A formula reading `self` gets it from before the write."""
    import warnings

    import torch

    lib = _python_library(tmp_path, monkeypatch, "ip_kernels", """\
        import torch

        def mul(self, other):
            return self * other

        def mul_(self, other):
            with torch.no_grad():  # a hand-written kernel: autograd sees nothing of it
                self.mul_(other)
            return self
        """, """\
        namespace: ipgrad
        ops:
          - func: mul(Tensor self, Tensor other) -> Tensor
            dispatch: {CompositeExplicitAutograd: "ip_kernels:mul"}
            fake: broadcast(self, other)
            derivatives:
              self: grad * other
              other: grad * self
          - func: mul_(Tensor(a!) self, Tensor other) -> Tensor(a!)
            dispatch: {CompositeExplicitAutograd: "ip_kernels:mul_"}
        """)
    try:
        def f(x, w):
            z = x * 1
            torch.ops.ipgrad.mul_(z, w)
            return z

        x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.double, requires_grad=True)
        w = torch.tensor([-2.0, 5.0, 7.0], dtype=torch.double, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # torch's fallback warns of "incorrect behavior"
            assert [g.tolist() for g in torch.autograd.grad(f(x, w).sum(), (x, w))] == \
                [[-2.0, 5.0, 7.0], [1.0, 2.0, 3.0]]
            assert torch.autograd.gradcheck(f, (x, w))
            assert torch.func.grad(lambda t: f(t, w.detach()).sum())(x.detach()).tolist() == \
                [-2.0, 5.0, 7.0]
            torch._dynamo.reset()
            compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
            assert [g.tolist() for g in torch.autograd.grad(compiled(x, w).sum(), (x, w))] == \
                [[-2.0, 5.0, 7.0], [1.0, 2.0, 3.0]]
        with torch.no_grad():
            y = torch.ones(3, dtype=torch.double)
            torch.ops.ipgrad.mul_(y, w)
        assert y.tolist() == [-2.0, 5.0, 7.0]
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            torch.ops.ipgrad.mul_(x, w)
    finally:
        lib.close()


FOREACH_KERNELS = """\
    import torch

    def mul(self, scalar):
        return [t * scalar for t in self]

    def mul_(self, scalar):
        with torch.no_grad():  # a hand-written kernel: autograd sees nothing of it
            for t in self:
                t.mul_(scalar)

    def addcmul(self, tensor1, tensor2, value=1):
        return [s + a * b * value for s, a, b in zip(self, tensor1, tensor2)]

    def addcmul_(self, tensor1, tensor2, value=1):
        with torch.no_grad():
            for s, a, b in zip(self, tensor1, tensor2):
                s.add_(a * b * value)
    """
FOREACH_OPS = """\
    namespace: fegrad
    ops:
      - func: _foreach_mul.Scalar(Tensor[] self, Scalar scalar) -> Tensor[]
        dispatch: {CompositeExplicitAutograd: "fe_kernels:mul"}
        fake: "[like(t) for t in self]"
        derivatives:
          self: "[g * scalar for g in grad]"
      - func: _foreach_mul_.Scalar(Tensor(a!)[] self, Scalar scalar) -> ()
        dispatch: {CompositeExplicitAutograd: "fe_kernels:mul_"}
      - func: _foreach_addcmul.Scalar(Tensor[] self, Tensor[] tensor1, Tensor[] tensor2, Scalar value=1) -> Tensor[]
        dispatch: {CompositeExplicitAutograd: "fe_kernels:addcmul"}
        fake: "[like(t) for t in self]"
        derivatives:
          self: "[g * 1 + 0 * s for g, s in zip(grad, self)]"
          tensor1: "[g * t2 * value for g, t2 in zip(grad, tensor2)]"
          tensor2: "[g * t1 * value for g, t1 in zip(grad, tensor1)]"
      - func: _foreach_addcmul_.Scalar(Tensor(a!)[] self, Tensor[] tensor1, Tensor[] tensor2, Scalar value=1) -> ()
        dispatch: {CompositeExplicitAutograd: "fe_kernels:addcmul_"}
    """


def foreach_step(mul_, addcmul_, a, b, c):
    xs = [a * 1.0, b * 1.0]
    mul_(xs, 3.0)
    addcmul_(xs, [c, c], [a, b], 0.5)
    return (xs[0] * xs[1]).sum()


def test_inplace_list_op_differentiates_through_its_functional_variant(tmp_path, monkeypatch):
    """An in-place op on a Tensor list (`_foreach_mul_(Tensor(a!)[] self, Scalar scalar) -> ()`)
    beside a functional variant with derivatives differentiates through it, copied into each
    tensor of `self`, as aten's foreach ops do: the same gradients as torch._foreach_mul_ and
    _foreach_addcmul_, eagerly, under torch.compile and torch.func.grad. Before, its Autograd
    kernel raised that it has no derivatives. A formula reading `self` gets it from before the
    write (the `self` formula of addcmul here)."""
    import torch

    lib = _python_library(tmp_path, monkeypatch, "fe_kernels", FOREACH_KERNELS, FOREACH_OPS)
    try:
        ops = torch.ops.fegrad
        mine = (lambda xs, s: ops._foreach_mul_.Scalar(xs, s),
                lambda xs, t1, t2, v: ops._foreach_addcmul_.Scalar(xs, t1, t2, v))
        aten = (torch._foreach_mul_, torch._foreach_addcmul_)
        args = [torch.randn(4, dtype=torch.double, requires_grad=True) for _ in range(3)]
        expected = torch.autograd.grad(foreach_step(*aten, *args), args)
        torch.testing.assert_close(torch.autograd.grad(foreach_step(*mine, *args), args), expected)
        torch._dynamo.reset()
        compiled = torch.compile(lambda *a: foreach_step(*mine, *a), backend="aot_eager",
                                 fullgraph=True)
        torch.testing.assert_close(torch.autograd.grad(compiled(*args), args), expected)
        torch.testing.assert_close(
            torch.func.grad(lambda a: foreach_step(*mine, a, *args[1:]))(args[0].detach()),
            expected[0])
        assert torch.autograd.gradcheck(lambda *a: foreach_step(*mine, *a), args)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            ops._foreach_mul_.Scalar([args[0]], 2.0)
        y = torch.ones(3)
        before = y._version
        ops._foreach_mul_.Scalar([y], 2.0)
        assert y.tolist() == [2.0] * 3 and y._version > before
    finally:
        lib.close()


def test_tensor_list_formula_gives_one_gradient_per_tensor(tmp_path, monkeypatch):
    """A Tensor[] input's formula must give a list as long as the input, or None: on the
    Python path, as the C++ path's TORCH_CHECK says, the message names the op and the input.
    Before, autograd said 'returned an incorrect number of gradients (expected 5, got 4)', a
    Tensor was unpacked into its rows, and None failed with "Value after * must be an
    iterable"."""

    import torch

    lib = _python_library(tmp_path, monkeypatch, "tl_kernels", """\
        def mix(tensors, weights):
            return sum(t * w for t, w in zip(tensors, weights))
        """, """\
        namespace: tlgrad
        ops:
          - func: mix(Tensor[] tensors, Tensor weights) -> Tensor
            dispatch: {CompositeExplicitAutograd: "tl_kernels:mix"}
            fake: like(tensors[0])
            derivatives:
              tensors: '[grad * w for w in weights[1:]]'
              weights: torch.stack([(grad * t).sum() for t in tensors])
          - func: mix_tensor(Tensor[] tensors, Tensor weights) -> Tensor
            dispatch: {CompositeExplicitAutograd: "tl_kernels:mix"}
            fake: like(tensors[0])
            derivatives:
              tensors: grad * weights[0]
              weights: torch.stack([(grad * t).sum() for t in tensors])
          - func: mix_none(Tensor[] tensors, Tensor weights) -> Tensor
            dispatch: {CompositeExplicitAutograd: "tl_kernels:mix"}
            fake: like(tensors[0])
            derivatives:
              tensors, weights: (None, torch.stack([(grad * t).sum() for t in tensors]))
        """)
    try:
        ts = [torch.ones(3, dtype=torch.double, requires_grad=True) for _ in range(3)]
        w = torch.tensor([1.0, 0.0, 2.0], dtype=torch.double, requires_grad=True)
        with pytest.raises(RuntimeError) as e:
            torch.ops.tlgrad.mix(ts, w).sum().backward()
        assert str(e.value) == "tlgrad::mix: the formula for 'tensors' gives 2 gradients for 3 tensors"
        with pytest.raises(RuntimeError) as e:
            torch.ops.tlgrad.mix_tensor(ts, w).sum().backward()
        assert str(e.value) == ("tlgrad::mix_tensor: the formula for 'tensors' gives a Tensor, "
                                "not a list, for 3 tensors")
        grads = torch.autograd.grad(torch.ops.tlgrad.mix_none(ts, w).sum(), [w, *ts],
                                    allow_unused=True)
        assert grads[0].tolist() == [3.0, 3.0, 3.0] and grads[1:] == (None, None, None)
    finally:
        lib.close()


def test_optional_tensor_list_given_none_differentiates(tmp_path, monkeypatch):
    """A `Tensor[]?` input (torch.library.register_autograd's path) passed as None, or left at
    its default: setup_context saves no element for it and backward gets None back (a formula
    may test `ws is None`), and its gradient is None; eagerly, under gradcheck, torch.compile
    and the sample checks. Before, setup_context failed with "save_for_backward() argument
    after * must be an iterable, not NoneType", and backward's `len(needs[1])` would have
    failed on the bool autograd gives for None (Note [None for a Tensor[]?])."""

    import torch

    from codegen import testing

    lib = _python_library(tmp_path, monkeypatch, "optlist_kernels", """\
        def blend(x, ws, ys):
            out = x if ws is None else x * sum(ws)
            return out + sum(y * y for y in ys)

        def scaled(x, ws=None, k=2):
            return x * k if ws is None else x * k + sum(ws)
        """, """\
        namespace: optlist
        ops:
          # Saved beside a Tensor and another list after it.
          - func: blend(Tensor x, Tensor[]? ws, Tensor[] ys) -> Tensor
            dispatch: {CompositeExplicitAutograd: "optlist_kernels:blend"}
            fake: like(x)
            derivatives:
              x: grad if ws is None else grad * sum(ws)
              ws: '[grad * x for _ in ws]'
              ys: '[2 * grad * y for y in ys]'
            samples:
              given: {x: {shape: [3]}, ws: [{shape: [3]}, {shape: [3]}], ys: [{shape: [3]}]}
              none: {x: {shape: [3]}, ws: null, ys: [{shape: [3]}, {shape: [3]}]}
              empty: {x: {shape: [3]}, ws: [], ys: [{shape: [3]}]}
          # The only list saved, with a default.
          - func: scaled(Tensor x, Tensor[]? ws=None, int k=2) -> Tensor
            dispatch: {CompositeExplicitAutograd: "optlist_kernels:scaled"}
            fake: like(x)
            derivatives:
              x: grad * k
              ws: '[grad for _ in ws]'
            samples:
              given: {x: {shape: [3]}, ws: [{shape: [3]}], k: 3}
              none: {x: {shape: [3]}, ws: null, k: 3}
              default: {x: {shape: [3]}}
        """)
    try:
        def leaf(*values):
            return torch.tensor(values, dtype=torch.double, requires_grad=True)

        x, y = leaf(1.0, 2.0, 3.0), leaf(-1.0, 0.5, 2.0)
        gx, gy = torch.autograd.grad(torch.ops.optlist.blend(x, None, [y]).sum(), (x, y))
        assert gx.tolist() == [1.0] * 3 and gy.tolist() == [-2.0, 1.0, 4.0]
        w = leaf(2.0, 2.0, 2.0)
        gx, gw, gy = torch.autograd.grad(torch.ops.optlist.blend(x, [w], [y]).sum(), (x, w, y))
        assert gx.tolist() == [2.0] * 3 and gw.tolist() == [1.0, 2.0, 3.0]
        for call, k in ((lambda t: torch.ops.optlist.scaled(t, None, 3), 3),
                        (lambda t: torch.ops.optlist.scaled(t, k=3), 3),
                        (lambda t: torch.ops.optlist.scaled(t), 2)):
            (g,) = torch.autograd.grad(call(x).sum(), (x,))
            assert g.tolist() == [float(k)] * 3
        assert torch.autograd.gradcheck(
            lambda a, b: torch.ops.optlist.blend(a, None, [b]), (x, y))
        assert torch.autograd.gradcheck(
            lambda a, b, c: torch.ops.optlist.blend(a, [b, c], [c]), (x, y, w))
        assert torch.autograd.gradcheck(lambda a: torch.ops.optlist.scaled(a, None, 3), (x,))
        assert torch.autograd.gradgradcheck(
            lambda a, b: torch.ops.optlist.blend(a, None, [b]), (x, y))

        def f(a, ws, b):
            return (torch.ops.optlist.blend(a, ws, [b]) + torch.ops.optlist.scaled(a, ws)).sum()

        torch._dynamo.reset()
        compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
        for ws in (None, [w]):
            leaves = (x, y) if ws is None else (x, y, w)
            want = torch.autograd.grad(f(x, ws, y), leaves)
            got = torch.autograd.grad(compiled(x, ws, y), leaves)
            for g, e in zip(got, want):
                torch.testing.assert_close(g, e)

        checked = 0
        for case in lib.cases():
            for check in testing.CHECKS:
                if testing.applies(case, check):
                    assert testing.run_check(case, check) is None, (case.id, check)
                    checked += check in ("opcheck", "gradients")
        assert checked == 12
    finally:
        lib.close()


def test_out_op_with_a_differentiable_input_raises_as_aten(tmp_path, monkeypatch):
    """An out= op beside a differentiable functional variant raises aten's error when an input
    requires grad. Before, torch's autograd fallback returned `out` detached, and the error came
    at backward ("element 0 of tensors does not require grad")."""

    import torch

    lib = _python_library(tmp_path, monkeypatch, "out_kernels", """\
        import torch

        def neg(self):
            return -self

        def neg_out(self, *, out):
            with torch.no_grad():  # a hand-written kernel: autograd sees nothing of it
                torch.neg(self, out=out)
            return out
        """, """\
        namespace: outgrad
        ops:
          - func: neg(Tensor self) -> Tensor
            dispatch: {CompositeExplicitAutograd: "out_kernels:neg"}
            fake: like(self)
            derivatives:
              self: -grad
          - func: neg.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)
            dispatch: {CompositeExplicitAutograd: "out_kernels:neg_out"}
        """)
    try:
        x = torch.ones(3, requires_grad=True)
        out = torch.empty(3)
        with pytest.raises(RuntimeError) as e:
            torch.ops.outgrad.neg.out(x, out=out)
        assert str(e.value) == ("outgrad::neg.out: functions with out=... arguments don't "
                                "support automatic differentiation, but one of the arguments "
                                "requires grad.")
        with torch.no_grad():
            assert torch.ops.outgrad.neg.out(x, out=out) is out
        assert out.tolist() == [-1.0] * 3
        assert torch.ops.outgrad.neg.out(x.detach() * 2, out=out).tolist() == [-2.0] * 3
    finally:
        lib.close()


NO_GRADIENT_KERNELS = """\
    import torch

    def rms_norm(result, input, weight, epsilon):
        with torch.no_grad():  # a hand-written kernel: autograd sees nothing of it
            rms = torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + epsilon)
            result.copy_(input * rms * weight)

    def fill_(self, value):
        with torch.no_grad():
            self.fill_(value)
    """
NO_GRADIENT_OPS = """\
    namespace: nograd
    ops:
      - func: rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()
        dispatch: {CompositeExplicitAutograd: "ng_kernels:rms_norm"}
      - func: fill_(Tensor(a!) self, float value) -> ()
        dispatch: {CompositeExplicitAutograd: "ng_kernels:fill_"}
    """


def check_no_gradient(ops) -> None:
    """What tests/test_py_autograd.py and tests/test_cpp_autograd.py both check of the ops of
    NO_GRADIENT_OPS (`ops`: their torch.ops namespace)."""
    import torch

    def norm(x, w):
        out = torch.empty_like(x)
        ops.rms_norm(out, x, w, 1e-6)
        return out

    def overwrite(x):
        z = x * 2
        ops.fill_(z, 3.0)
        return z.sum()

    x = torch.randn(2, 4, dtype=torch.double)
    w = torch.rand(4, dtype=torch.double) + 0.5
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    said = "nograd::rms_norm writes to 'result' and has no derivatives, but an argument requires grad"
    with pytest.raises(RuntimeError, match=re.escape(said)):
        norm(xg, w).sum().backward()
    with pytest.raises(RuntimeError, match=re.escape(said)):
        norm(x, wg)
    with pytest.raises(RuntimeError, match=re.escape(said)):
        torch.func.grad(lambda t: norm(t, w).sum())(x)
    with pytest.raises(RuntimeError, match=re.escape(
            "nograd::fill_ writes to 'self'") + ".*" + re.escape(
            "to differentiate it, return what it writes (`-> Tensor(a!)`), so that it "
            "differentiates through its functional variant 'fill' once that has derivatives")):
        overwrite(xg)           # the written tensor requires grad: its history would be kept
    with pytest.raises(RuntimeError, match=re.escape("nograd::fill_ writes to 'self'")):
        torch.func.grad(overwrite)(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=re.escape(said)):
        torch.compile(lambda a, b: norm(a, b).sum(), backend="aot_eager", fullgraph=True)(xg, wg)
    # A forward-mode tangent reaching the op: below autograd it would keep its old tangent.
    with pytest.raises(NotImplementedError, match=re.escape(
            "nograd::rms_norm writes to its arguments and has no forward-mode derivative")):
        torch.func.jvp(lambda t: norm(t, w), (x,), (torch.ones_like(x),))

    # Without a gradient to record, the op runs (and autograd sees the write).
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    with torch.no_grad():
        assert torch.allclose(norm(xg, wg), expected)
    with torch.inference_mode():
        assert torch.allclose(norm(x, w), expected)
    out = torch.empty_like(x)
    version = out._version
    ops.rms_norm(out, x, w, 1e-6)
    assert torch.allclose(out, expected) and out._version > version
    torch._dynamo.reset()
    compiled = torch.compile(norm, backend="aot_eager", fullgraph=True)
    assert torch.allclose(compiled(x, w), expected)
    torch.library.opcheck(ops.rms_norm, (torch.empty_like(x), x, w, 1e-6))
    torch.library.opcheck(ops.fill_, (x.clone(), 2.0))


def test_ops_writing_arguments_without_derivatives_refuse_gradients(tmp_path, monkeypatch):
    """An op writing to its arguments with nothing to differentiate it (vLLM's
    `rms_norm(Tensor! result, ...) -> ()`) raises, naming itself, when grad mode is on and an
    argument requires grad, as aten's autograd_not_implemented_fallback does. Before, torch's
    autograd fallback recorded nothing for the write: torch.func.grad gave zeros, backward
    through the written tensor kept its old history (fill_: a gradient of 2 where it is 0), or
    failed at backward with "element 0 of tensors does not require grad". Inference (no_grad,
    no input requiring grad, torch.compile with fullgraph) runs as before, and opcheck passes."""
    lib = _python_library(tmp_path, monkeypatch, "ng_kernels", NO_GRADIENT_KERNELS,
                          NO_GRADIENT_OPS)
    try:
        import torch

        check_no_gradient(torch.ops.nograd)
    finally:
        lib.close()


NO_FORWARD_KERNELS = NO_GRADIENT_KERNELS.rstrip(" ") + """\

    def scale(self, alpha):
        return self * alpha

    def scale_(self, alpha):
        with torch.no_grad():
            return self.mul_(alpha)
    """
NO_FORWARD_OPS = NO_GRADIENT_OPS.rstrip(" ") + """\
      - func: clampmin_(Tensor(a!) self, float value) -> Tensor(a!)
        dispatch: {CompositeExplicitAutograd: "nf_kernels:fill_"}
      - func: scale(Tensor self, float alpha) -> Tensor
        dispatch: {CompositeExplicitAutograd: "nf_kernels:scale"}
        fake: like(self)
        derivatives:
          self: grad * alpha
      - func: scale_(Tensor(a!) self, float alpha) -> Tensor(a!)
        dispatch: {CompositeExplicitAutograd: "nf_kernels:scale_"}
    """


def test_ops_writing_arguments_refuse_forward_mode_ad(tmp_path, monkeypatch):
    """Forward-mode AD (torch.func.jvp, forward_ad) through an op writing to its arguments:
    the Python Autograd kernels (every stable-ABI namespace has them) checked only for
    requires_grad, so a tangent reaching rms_norm or fill_ ran the op below autograd and the
    written tensor kept its old tangent: jvp gave 0 for rms_norm, and for scale_ (through its
    differentiable functional `scale`) the tangent unscaled, 12 where it is 24. Now the op
    without derivatives raises NotImplementedError naming itself, and scale_ goes through
    scale, whose Function says it has no forward-mode derivative; without a tangent the ops
    run as before inside jvp."""
    lib = _python_library(tmp_path, monkeypatch, "nf_kernels",
                          NO_FORWARD_KERNELS.replace("ng_kernels", "nf_kernels"),
                          NO_FORWARD_OPS.replace("ng_kernels", "nf_kernels"))
    try:
        import torch
        import torch.autograd.forward_ad as fwAD

        ops = torch.ops.nograd
        x, w = torch.randn(3, 4), torch.rand(4) + 0.5

        def norm(t):
            out = torch.empty_like(t)
            ops.rms_norm(out, t, w, 1e-6)
            return out

        def clamped(t):
            return ops.clampmin_(t.clone(), 0.0)

        said = ("nograd::rms_norm writes to its arguments and has no forward-mode derivative "
                "(torch.func.jvp, jacfwd and forward_ad are not supported): a tangent reached it")
        with pytest.raises(NotImplementedError, match=re.escape(said)):
            torch.func.jvp(norm, (x,), (torch.ones_like(x),))
        with pytest.raises(NotImplementedError, match=re.escape(said)):
            with fwAD.dual_level():
                norm(fwAD.make_dual(x, torch.ones_like(x)))
        with pytest.raises(NotImplementedError, match=re.escape("nograd::clampmin_ writes to")):
            torch.func.jvp(clamped, (x,), (torch.ones_like(x),))
        with pytest.raises(NotImplementedError, match=re.escape(
                "nograd::scale has no forward-mode derivative")):
            torch.func.jvp(lambda t: ops.scale_(t.clone(), 2.0), (x,), (torch.ones_like(x),))
        # No tangent reaches the op: it runs inside jvp as outside.
        expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        out, tangent = torch.func.jvp(lambda t: norm(x) + t, (x,), (torch.ones_like(x),))
        assert torch.allclose(out, expected + x) and torch.equal(tangent, torch.ones_like(x))
        y = x.clone()
        with fwAD.dual_level():
            ops.scale_(y, 2.0)
        assert torch.equal(y, x * 2)
    finally:
        lib.close()


def test_conditions_on_metadata_trace_under_compile(tmp_path, monkeypatch):
    """What the checker keeps of a formula's conditions (sizes, dtypes, `is None`, non-Tensor
    arguments: Note [Data-dependent conditions] in codegen/formulas.py) traces in a compiled
    backward with dynamic shapes; one on tensor values (`x.sum() > 0`) raised
    GuardOnDataDependentSymNode there, and `check` now refuses it."""

    import torch

    lib = _python_library(tmp_path, monkeypatch, "cond_kernels", """\
        def scaled(x, bias, ws, n):
            return x * 2 if bias is None else x * 2 + bias
        """, """\
        namespace: condgrad
        ops:
          - func: scaled(Tensor x, Tensor? bias, float[] ws, int n) -> Tensor
            dispatch: {CompositeExplicitAutograd: "cond_kernels:scaled"}
            fake: like(x)
            derivatives:
              x: >-
                grad * 2 if x.dim() == 1 and x.size(0) > 1 and x.numel()
                and x.dtype == torch.float64 and not x.is_complex() and n > 0 and max(ws) > 0
                else grad * 0
              bias: 'None if bias is None else unbroadcast(grad, bias)'
        """)
    try:
        def f(x, bias):
            return torch.ops.condgrad.scaled(x, bias, [0.5, 1.0], 1).sum()

        torch._dynamo.reset()
        compiled = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
        for n in (3, 5):
            x = torch.ones(n, dtype=torch.double, requires_grad=True)
            b = torch.ones(1, dtype=torch.double, requires_grad=True)
            gx, gb = torch.autograd.grad(compiled(x, b), (x, b))
            assert gx.tolist() == [2.0] * n and gb.tolist() == [float(n)]
            (gx,) = torch.autograd.grad(compiled(x, None), (x,))
            assert gx.tolist() == [2.0] * n
    finally:
        lib.close()


def _reference_block(doc: str) -> str:
    """The op entries of the language reference's first example (codegen/formulas.py)."""
    start = doc.index("    - func: ")
    return textwrap.dedent(doc[start:doc.index("\nKeys\n", start)])


def test_the_reference_examples_are_right(tmp_path, monkeypatch):
    """The formulas the language reference (codegen/formulas.py) and docs/FORMAT.md show, run:
    gradcheck, with a zero weight where the formula tests one. The reference's Tensor[] example
    once filtered zero weights out (`[... for t, w in zip(tensors, weights) if w != 0]`), which
    gives fewer gradients than tensors: an error at run time."""

    import torch

    from codegen import formulas as F

    doc = F.__doc__
    format_md = (Path(__file__).resolve().parent.parent / "docs" / "FORMAT.md").read_text()
    inline = {
        "mix": "[unbroadcast(grad * w, t) if w != 0 else None for t, w in zip(tensors, weights)]",
        "spread": "sum([g * w for g, w in zip(grad, weights) if w != 0], torch.zeros_like(self))",
        "soft_limit": "t = torch.tanh(self / limit); grad * (1 - t * t)",
    }
    for text in inline.values():
        assert text in " ".join(doc.split()), text
    for text in ("t = torch.tanh(self); grad * (1 - t * t)", "x: torch.cat(grad, 0)"):
        assert text in format_md, text
    block = _reference_block(doc).replace("exops.", "docgrad.")
    ops = "namespace: docgrad\nops:\n" + textwrap.indent(block + f"""\
- func: scaled_mul_backward(Tensor grad, Tensor self, Tensor other, float alpha) -> Tensor
- func: mix(Tensor[] tensors, float[] weights) -> Tensor
  derivatives:
    tensors: '{inline["mix"]}'
- func: spread(Tensor self, float[] weights) -> Tensor[]
  derivatives:
    self: '{inline["spread"]}'
- func: soft_limit(Tensor self, float limit) -> Tensor
  derivatives:
    self: '{inline["soft_limit"]}'
- func: tanh(Tensor self) -> Tensor
  derivatives:
    self: 't = torch.tanh(self); grad * (1 - t * t)'
- func: rows(Tensor x) -> Tensor[]
  derivatives:
    x: torch.cat(grad, 0)
""", "  ")
    # Every op's kernel is the function of its name in doc_kernels.
    ops = re.sub(r"(?m)^(  - func: (\w+)\(.*\n)",
                 lambda m: f'{m.group(1)}    dispatch: {{CompositeExplicitAutograd: '
                           f'"doc_kernels:{m.group(2)}"}}\n', ops)
    lib = _python_library(tmp_path, monkeypatch, "doc_kernels", """\
        import torch

        def scaled_mul(self, other, *, alpha=1.0):
            return self * other * alpha

        def scaled_mul_backward(grad, self, other, alpha):
            return (grad * self * alpha).sum_to_size(other.shape)

        def minmax(self):
            return self.amin(), self.amax()

        def lookup(table, index):
            return table[index]

        def mix(tensors, weights):
            return sum(t * w for t, w in zip(torch.broadcast_tensors(*tensors), weights))

        def spread(self, weights):
            return [self * w for w in weights]

        def soft_limit(self, limit):
            return limit * torch.tanh(self / limit)

        def tanh(self):
            return torch.tanh(self)

        def rows(x):
            return [r.clone() for r in x.split(1, 0)]
        """, textwrap.dedent(ops))
    try:
        d = torch.float64
        ns = torch.ops.docgrad

        def check(fn, *inputs):
            assert torch.autograd.gradcheck(fn, inputs)

        x, y = (torch.randn(3, 4, dtype=d, requires_grad=True) for _ in range(2))
        row = torch.randn(4, dtype=d, requires_grad=True)
        check(lambda a, b: ns.scaled_mul(a, b, alpha=2.0), x, row)
        check(lambda a: ns.minmax(a), x)
        table = torch.randn(5, 3, dtype=d, requires_grad=True)
        index = torch.tensor([0, 2, 2, 4])
        check(lambda t: ns.lookup(t, index), table)
        check(lambda a, b, c: ns.mix([a, b, c], [0.5, 0.0, 2.0]), x, row, y)
        check(lambda a: ns.spread(a, [0.5, 0.0, 2.0]), x)
        check(lambda a: ns.spread(a, [0.0]), x)
        check(lambda a: ns.soft_limit(a, 2.0), x)
        check(lambda a: ns.tanh(a), x)
        check(lambda a: ns.rows(a), x)
    finally:
        lib.close()


def test_keyword_only_tensors_may_be_non_differentiable(tmp_path, monkeypatch):
    """A keyword-only Tensor marked `non_differentiable` (aten's `_flash_attention_forward(...,
    *, Tensor? seqused_k=None, ...)`, xformers' `*, Tensor? seqlen_k=None`) passes check and
    differentiates the other inputs; before, any keyword-only Tensor refused the op's
    derivatives. (torch.library.register_autograd, the path of an op with a `Tensor[]?`
    input, refuses them: tests/diagnostics_py/grad_kwarg_only_tensor_list.yaml.)"""

    import torch

    from codegen import testing

    lib = _python_library(tmp_path, monkeypatch, "kwonly_kernels", """\
        def attn(q, k, *, mask=None, scale=1.0):
            s = q * k * scale
            return s if mask is None else s + mask
        """, """\
        namespace: kwonly
        ops:
          - func: attn(Tensor q, Tensor k, *, Tensor? mask=None, float scale=1.0) -> Tensor
            dispatch: {CompositeExplicitAutograd: "kwonly_kernels:attn"}
            fake: like(q)
            derivatives:
              q: grad * k * scale
              k: grad * q * scale
              mask: non_differentiable
            samples:
              none: {q: {shape: [3]}, k: {shape: [3]}}
              given: {q: {shape: [3]}, k: {shape: [3]}, mask: {shape: [3]}, scale: 0.5}
        """)
    try:
        q = torch.tensor([1.0, 2.0, 3.0], dtype=torch.double, requires_grad=True)
        k = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.double, requires_grad=True)
        mask = torch.ones(3, dtype=torch.double, requires_grad=True)
        out = torch.ops.kwonly.attn(q, k, mask=mask, scale=0.5)
        gq, gk = torch.autograd.grad(out.sum(), (q, k))
        assert gq.tolist() == [-0.5, 0.25, 1.0] and gk.tolist() == [0.5, 1.0, 1.5]
        assert torch.autograd.gradcheck(
            lambda a, b: torch.ops.kwonly.attn(a, b, mask=mask.detach()), (q, k))
        checked = 0
        for case in lib.cases():
            for check in ("opcheck", "gradients", "export"):
                if testing.applies(case, check):
                    assert testing.run_check(case, check) is None, (case.id, check)
                    checked += 1
        assert checked == 6
    finally:
        lib.close()


def test_formulas_read_non_tensor_outputs(tmp_path, monkeypatch):
    """A formula reading an int or SymInt output (xformers' `efficient_attention_forward_cutlass
    -> (Tensor output, ..., SymInt max_seqlen_batch_q, SymInt max_seqlen_batch_k)`, passed on to
    its backward op) gets it from ctx: before, setup_context gave it to save_for_backward,
    which raised "save_for_backward can only save variables, but argument 1 is of type int"
    on every differentiated call. Both autograd paths (the Function; register_autograd for an
    op with a `Tensor[]?` input), eagerly and under torch.compile."""

    import torch

    from codegen import testing

    lib = _python_library(tmp_path, monkeypatch, "intout_kernels", """\
        def scaled(x):
            return x * x.size(0), x.size(0)

        def blend(x, ws=None):
            return x * x.size(0) if ws is None else x * sum(ws), x.size(0)
        """, """\
        namespace: intout
        ops:
          - func: scaled(Tensor x) -> (Tensor y, SymInt n)
            dispatch: {CompositeExplicitAutograd: "intout_kernels:scaled"}
            fake: (like(x), x.size(0))
            derivatives:
              output_differentiability: [true, false]
              x: grad_y * n
            samples:
              - {x: {shape: [N=3]}}
          - func: blend(Tensor x, Tensor[]? ws=None) -> (Tensor y, int n)
            dispatch: {CompositeExplicitAutograd: "intout_kernels:blend"}
            fake: (like(x), x.size(0))
            derivatives:
              output_differentiability: [true, false]
              x: grad_y * n if ws is None else grad_y * sum(ws)
              ws: '[grad_y * x for _ in ws]'
            samples:
              - {x: {shape: [3]}}
        """)
    try:
        x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.double, requires_grad=True)
        (g,) = torch.autograd.grad(torch.ops.intout.scaled(x)[0].sum(), (x,))
        assert g.tolist() == [3.0] * 3
        (g,) = torch.autograd.grad(torch.ops.intout.blend(x)[0].sum(), (x,))
        assert g.tolist() == [3.0] * 3

        def f(t):
            return torch.ops.intout.scaled(t)[0].sum()

        torch._dynamo.reset()
        compiled = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
        for n in (3, 5):
            t = torch.ones(n, dtype=torch.double, requires_grad=True)
            (g,) = torch.autograd.grad(compiled(t), (t,))
            assert g.tolist() == [float(n)] * n
        checked = 0
        for case in lib.cases():
            for check in ("opcheck", "gradients"):
                if testing.applies(case, check):
                    assert testing.run_check(case, check) is None, (case.id, check)
                    checked += 1
        assert checked == 4
    finally:
        lib.close()


@pytest.mark.parametrize("schema, how", [
    # PyTorch's optimizers write several lists: no functional route to point at.
    ("_fused_sgd_(Tensor(a!)[] self, Tensor(b!)[] grads, *, float lr) -> ()",
     "call instead an op that returns what this one writes and has derivatives (an op writing "
     "to its arguments takes none)"),
    ("_foreach_zero_(Tensor(a!)[] self) -> ()",
     "declare its functional variant '_foreach_zero', returning the new 'self' as a Tensor[], "
     "with derivatives (this op then differentiates through it)"),
    ("fill_(Tensor(a!) self, float value) -> ()",
     "return what it writes (`-> Tensor(a!)`), so that it differentiates through its "
     "functional variant 'fill' once that has derivatives"),
])
def test_no_gradient_message_of_a_list_writer_says_what_would_differentiate_it(schema, how):
    """A mutated Tensor list returned (`-> Tensor(a!)[]`) is what torch.compile cannot
    functionalize, so an op writing lists is not told to return what it writes, as `fill_` is:
    an in-place foreach op differentiates through `f(Tensor[] self) -> Tensor[]` once that has
    derivatives, and an optimizer writing several lists through no variant."""
    from codegen.dest.cpp_autograd import no_gradient_message
    from codegen.model import Op
    from codegen.parse import parse_schema

    op = Op(schema=parse_schema(f"ns::{schema}"), loc=None)
    message = no_gradient_message(op)
    assert message.endswith(f"to differentiate it, {how}"), message


NESTED_KERNELS = """\
    import torch

    def scale_lists(noop_flag, lists, s):
        with torch.no_grad():  # a hand-written kernel: autograd sees nothing of it
            for src, dst in zip(lists[0], lists[1]):
                dst.copy_(src * s)
    """
NESTED_OPS = """\
    namespace: nestgrad
    suppress: [not-functionalizable]
    ops:
      # The dispatcher sees no Tensor inside a Tensor[][]: its keys come from noop_flag.
      - func: scale_lists(Tensor(a!) noop_flag, Tensor(b!)[][] lists, float s) -> ()
        dispatch: {CompositeExplicitAutograd: "nest_kernels:scale_lists"}
    """


def check_nested_writes(scale_lists) -> None:
    """What tests/test_py_autograd.py and tests/test_cpp_autograd.py both check of an op writing
    the Tensors of a `Tensor(a!)[][]` (apex's amp_multi_tensor_scale)."""
    import torch

    a = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=re.escape(
            "scale_lists writes to 'noop_flag', 'lists' and has no derivatives, but an argument "
            "requires grad")):
        scale_lists(torch.zeros(1), [[torch.randn(3)], [a * 1.0]], 2.0)
    dst = a * 1.0
    saved = dst * dst       # mul saves dst
    with torch.no_grad():
        scale_lists(torch.zeros(1), [[torch.ones(3)], [dst]], 2.0)
    assert dst.tolist() == [2.0] * 3
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.sum().backward()
    x = torch.zeros(3)
    for mode in (torch.no_grad, torch.inference_mode):
        before = x._version
        with mode():
            scale_lists(torch.zeros(1), [[torch.ones(3)], [x]], 3.0)
        assert x._version == before + 1, mode
    with torch.inference_mode():
        frozen = torch.zeros(3)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside"):
        scale_lists(torch.zeros(1), [[torch.ones(3)], [frozen]], 3.0)


def test_writes_inside_a_tensor_list_of_lists_are_seen_by_autograd(tmp_path, monkeypatch):
    """The Tensors an op writes inside a `Tensor(a!)[][]` are written as any other: an argument
    requiring grad is refused, and each written Tensor's version is bumped (a backward that
    saved one raises). Before, the generated kernels looked at Tensor, Tensor? and Tensor[]
    arguments only: the write went unseen and the gradient was silently wrong."""
    import torch

    lib = _python_library(tmp_path, monkeypatch, "nest_kernels", NESTED_KERNELS, NESTED_OPS)
    try:
        check_nested_writes(torch.ops.nestgrad.scale_lists)
    finally:
        lib.close()
