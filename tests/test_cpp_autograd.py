"""C++ autograd from formulas (codegen.dest.cpp_autograd, Note [C++ autograd]): golden output for
an op file exercising the translator, its notes for the ops it leaves to Python, that the output
compiles warning-free, and that the example library's differentiable ops run on it."""

from __future__ import annotations

import json
import shlex
import subprocess
import textwrap
from pathlib import Path

import pytest

from codegen import config, gen
from codegen.dest import cpp_autograd
from codegen.diagnostics import Diagnostics
from codegen.load import load_library
from tests import expect

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
INPUT = "tests/golden/cpp/inputs/autograd.yaml"
EXPECTED = HERE / "golden" / "cpp" / "expected" / "autograd"


def _render(paths: list[str]) -> tuple[dict[str, str], Diagnostics]:
    lib = load_library(paths)
    diags = Diagnostics()
    project = config.default_project(ROOT)
    out = cpp_autograd.generate(lib, diags, project)
    gen.check_library(lib, diags, project)
    return out, diags


def _check_beside_python(tmp_path: Path, ops: str, kernels: str, check: str, cpp_ns: str,
                         py_ns: str, names: tuple[str, ...]) -> None:
    """Build `ops` and `kernels` (formatted with `ns`, and `ops` with `setting`) in two
    namespaces, `cpp_ns`, where each op of `names` takes the C++ path, and `py_ns` with
    `autograd: python`; then run the script `check`, which compares them and prints "ok"."""
    from tests import scratch

    root = scratch.make_root(
        tmp_path,
        {f"{cpp_ns}.yaml": ops.format(ns=cpp_ns, setting=""),
         f"{py_ns}.yaml": ops.format(ns=py_ns, setting="autograd: python\n")},
        {f"{ns}/kernels.cpp": kernels.format(ns=ns) for ns in (cpp_ns, py_ns)})
    lib = load_library([str(root / "schemas" / f"{cpp_ns}.yaml")])
    assert {str(op.name): cpp_autograd.reason(lib, op) for op in lib.ops} == {
        f"{cpp_ns}::{name}": None for name in names}
    for step in (scratch.generate, scratch.build):
        proc = step(root)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = scratch.python(root, check, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_golden_autograd(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    out, diags = _render([INPUT])
    assert not diags.has_errors, diags.render()
    expect.check_dir(EXPECTED, out)


def test_python_path_is_a_located_note(monkeypatch) -> None:
    """What C++ cannot carry keeps the Python path, and `check` says so where the formula is."""
    monkeypatch.chdir(ROOT)
    _, diags = _render([INPUT])
    notes = [d for d in diags.items if d.severity == "note"]
    assert [(str(d.loc), d.message) for d in notes] == [
        (f"{INPUT}:53:13", "agrad::gelu_like: its Autograd kernel stays in Python: its formulas "
                          "use torch.nn.functional.gelu, which the C++ translation does not "
                          "carry"),
    ]
    assert not diags.has_errors


def test_torch_function_note_names_it_once(tmp_path: Path) -> None:
    """A torch function the translator does not know is named, with the reason said once."""
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: trq\nops:\n"
                    "  - func: shrink(Tensor self) -> Tensor\n"
                    "    dispatch: {CPU: shrink_cpu}\n"
                    "    fake: like(self)\n"
                    "    derivatives:\n"
                    "      self: grad * torch.special.i0e(self)\n")
    _, diags = _render([str(path)])
    assert [d.message for d in diags.items] == [
        "trq::shrink: its Autograd kernel stays in Python: its formulas use torch.special.i0e, "
        "which the C++ translation does not carry"]


def test_output_read_as_a_constant_keeps_the_python_path(tmp_path: Path) -> None:
    """A formula reading a non-differentiable output of a differentiable input's dtype makes the
    op differentiable once, which only the Python path does (a C++ Node gave a wrong second
    derivative)."""
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: trq\nops:\n"
                    "  - func: cubed_sum(Tensor x) -> (Tensor total, Tensor slope)\n"
                    "    dispatch: {CPU: cubed_sum_cpu}\n"
                    "    fake: (empty([]), like(x))\n"
                    "    suppress: [constant-in-backward]\n"
                    "    derivatives:\n"
                    "      x: grad_total * slope\n"
                    "      output_differentiability: [true, false]\n")
    out, diags = _render([str(path)])
    assert [d.message for d in diags.items] == [
        "trq::cubed_sum: its Autograd kernel stays in Python: its formulas read output 1 "
        "('slope'), non-differentiable, as a constant (the Python path makes the op "
        "differentiable once, with an error on a second backward)"]
    assert not any("CubedSumBackward" in text for text in out.values())


def test_library_op_argument_note_says_why(tmp_path: Path) -> None:
    """An argument of a library op call that the C++ translation does not pass says why: its
    parameter's type, or what the formula gives it (the note named the argument only)."""
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: trq\nops:\n"
                    "  - func: a(Tensor x) -> Tensor\n"
                    "    dispatch: {CPU: a_cpu}\n"
                    "    fake: like(x)\n"
                    "    derivatives:\n"
                    "      x: takes(grad, sizes=x.shape)\n"
                    "  - func: b(Tensor x) -> Tensor\n"
                    "    dispatch: {CPU: b_cpu}\n"
                    "    fake: like(x)\n"
                    "    derivatives:\n"
                    "      x: takes(grad, x.size(0))\n"
                    "  - func: takes(Tensor grad, float s=1.0, SymInt[] sizes=[]) -> Tensor\n"
                    "    dispatch: {CPU: takes_cpu}\n"
                    "    fake: like(grad)\n"
                    "    derivatives:\n"
                    "      grad: not_implemented('double backward')\n")
    _, diags = _render([str(path)])
    assert [d.message for d in diags.items] == [
        "trq::a: its Autograd kernel stays in Python: argument 'sizes' of trq::takes is a "
        "SymInt[], a type the C++ translation does not pass to a library op",
        "trq::b: its Autograd kernel stays in Python: argument 's' of trq::takes is a float, "
        "and the formula gives it a SymInt, which the C++ translation does not convert to one"]


def test_note_names_what_is_not_carried_not_the_ir(tmp_path: Path) -> None:
    """A torch constant (torch.pi) or an index the translation does not carry (a
    Tensor's mask, a slice of a Tensor[] or of sizes) is named as written, not by the formula
    IR's class names (the note said 'the expression TorchRef')."""
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: frm\nops:\n"
                    "  - func: a(Tensor self) -> Tensor\n"
                    "    dispatch: {CPU: a_cpu}\n"
                    "    fake: like(self)\n"
                    "    derivatives:\n"
                    "      self: grad * torch.pi\n"
                    "  - func: b(Tensor self) -> Tensor\n"
                    "    dispatch: {CPU: b_cpu}\n"
                    "    fake: like(self)\n"
                    "    derivatives:\n"
                    "      self: grad[self > 0].sum() * self\n"
                    "  - func: c(Tensor[] tensors) -> Tensor\n"
                    "    dispatch: {CPU: c_cpu}\n"
                    "    fake: like(tensors[0])\n"
                    "    derivatives:\n"
                    "      tensors: '[grad for t in tensors[1:]]'\n"
                    "  - func: d(Tensor self) -> Tensor\n"
                    "    dispatch: {CPU: d_cpu}\n"
                    "    fake: like(self)\n"
                    "    derivatives:\n"
                    "      self: grad.reshape(self.shape[::-1])\n")
    _, diags = _render([str(path)])
    assert [d.message for d in diags.items] == [
        "frm::a: its Autograd kernel stays in Python: its formulas use torch.pi, which the "
        "C++ translation does not carry",
        "frm::b: its Autograd kernel stays in Python: its formulas use indexing a Tensor with a "
        "Tensor, which the C++ translation does not carry",
        "frm::c: its Autograd kernel stays in Python: its formulas use slicing a Tensor[], which "
        "the C++ translation does not carry",
        "frm::d: its Autograd kernel stays in Python: its formulas use slicing sizes with a "
        "step, which the C++ translation does not carry"]


def _carried(tmp_path: Path, ns: str, params: str, formulas: dict, *, idx: bool = False,
             others: str = ""):
    """Loads one op `<name>(Tensor x, <params>) -> Tensor` per entry of `formulas` (name ->
    (the formula of x, the C++ of its grad_inputs[0] or None)), with `idx: non_differentiable`
    where `idx`, then the ops of `others`; asserts each of the former takes the C++ path, with
    that translation where one is given. Returns the library."""
    path = tmp_path / "ops.yaml"
    path.write_text(f"namespace: {ns}\nops:\n" + "".join(
        f"  - func: {name}(Tensor x, {params}) -> Tensor\n"
        f"    dispatch: {{CPU: {name}_cpu}}\n"
        "    fake: like(x)\n"
        "    derivatives:\n"
        f"      x: {json.dumps(formula)}\n"
        + ("      idx: non_differentiable\n" if idx else "")
        for name, (formula, _) in formulas.items()) + others)
    lib = load_library([str(path)])
    for op in lib.ops:
        if op.name.name not in formulas:
            continue
        assert cpp_autograd.reason(lib, op) is None, (op.name, cpp_autograd.reason(lib, op))
        plan = cpp_autograd.plan(lib, op)
        assert plan is not None
        cpp = formulas[op.name.name][1]
        if cpp is not None:
            line = f"  grad_inputs[0] = {cpp};"
            # a translation of several lines is one entry of the body
            assert line in (plan.body if "\n" not in line else "\n".join(plan.body)), plan.body
    return lib


def test_sizes_arithmetic_cat_and_indexing_are_carried(tmp_path: Path) -> None:
    """Formulas mixing floats with SymInt sizes and arguments, `torch.cat` and indexing take the
    C++ path (they kept the Python one, with a note), and print as the C++ of Python's meaning:
    `/` of numbers is a true division, indexing is at::indexing's."""
    formulas = {
        "a": ("grad / x.size(0)", "(grad / at::Scalar(x_sizes_[c10::maybe_wrap_dim(0, "
              "static_cast<int64_t>(x_sizes_.size()), /*wrap_scalar=*/false)]))"),
        "b": ("grad * (1.0 / n)",
              "(grad * at::Scalar(opgen_true_divide(c10::SymFloat(1.0), c10::SymFloat(n))))"),
        "c": ("grad * (x.numel() * 0.5)",
              "(grad * at::Scalar((c10::SymFloat(x.sym_numel()) * c10::SymFloat(0.5))))"),
        "d": ("torch.cat([grad, grad[..., :n]], -1)[..., :x.shape[-1]]",
              "at::cat(std::vector<at::Tensor>{grad, grad.index({at::indexing::Ellipsis, "
              "at::indexing::Slice(std::nullopt, n)})}, (-1)).index({at::indexing::Ellipsis, "
              "at::indexing::Slice(std::nullopt, x_sizes_[c10::maybe_wrap_dim((-1), "
              "static_cast<int64_t>(x_sizes_.size()), /*wrap_scalar=*/false)])})"),
        "e": ("grad[0] * x[:, 1:][-1, ::2]",
              "(grad.index({0}) * x.index({at::indexing::Slice(), at::indexing::Slice(1)})"
              ".index({(-1), at::indexing::Slice(std::nullopt, std::nullopt, 2)}))"),
    }
    _carried(tmp_path, "sym", "SymInt n", formulas)


def test_python_kernels_keep_python_autograd_without_a_note(tmp_path: Path, monkeypatch) -> None:
    """An op whose kernels are Python functions keeps Python autograd by its nature: no note (the
    example library printed one per such op on every `make codegen`); a C++-kernel op beside it
    still gets its note."""
    monkeypatch.chdir(ROOT)
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: pyk\nops:\n"
                    "  - func: halve(Tensor self) -> Tensor\n"
                    "    dispatch: {CPU: runtime.kernels.exops:gated_residual}\n"
                    "    fake: like(self)\n"
                    "    derivatives:\n"
                    "      self: grad * 0.5\n"
                    "  - func: shrink(Tensor self) -> Tensor\n"
                    "    dispatch: {CPU: shrink_cpu}\n"
                    "    fake: like(self)\n"
                    "    derivatives:\n"
                    "      self: grad * torch.special.i0e(self)\n")
    lib = load_library([str(path)])
    halve = next(op for op in lib.ops if str(op.name) == "pyk::halve")
    assert cpp_autograd.reason(lib, halve) == "its kernels are Python functions"
    _, diags = _render([str(path)])
    assert [d.message for d in diags.items] == [
        "pyk::shrink: its Autograd kernel stays in Python: its formulas use torch.special.i0e, "
        "which the C++ translation does not carry"]


def test_example_library_split(monkeypatch) -> None:
    """The example's C++-kernel ops get C++ autograd; its Python-kernel ops and the stable
    namespace keep Python, and the Python module registers no Autograd kernel for the others."""
    monkeypatch.chdir(ROOT)
    lib = load_library(["schemas/core.yaml", "schemas/python.yaml", "schemas/stable.yaml"])
    cpp_ops = sorted(str(op.name) for op in lib.ops if cpp_autograd.uses_cpp(lib, op))
    assert cpp_ops == ["exops::scaled_add", "exops::smooth_clamp", "exops::smooth_clamp_backward",
                       "exops::soft_shrink", "exops::weighted_sum"]
    assert cpp_autograd.reason(lib, next(o for o in lib.ops if str(o.name) == "exstable::scale")) \
        == "its namespace is on the stable ABI, which has no autograd API"
    reg = (ROOT / "generated/runtime/_reg_exops.py").read_text()
    assert '_lib.impl("scaled_add", _scaled_add_autograd' not in reg
    assert "_RowNormalizeFunction" in reg


def test_autograd_python_key(tmp_path: Path, monkeypatch) -> None:
    """`autograd: python` keeps every op of the file on the Python path, without a note."""
    text = (ROOT / INPUT).read_text().replace("namespace: agrad\n",
                                              "namespace: agrad\nautograd: python\n")
    path = tmp_path / "ops.yaml"
    path.write_text(text)
    out, diags = _render([str(path)])
    assert out == {}
    assert not [d for d in diags.items if d.severity == "note"]
    # An op of another load of the same file is on the same path (sample checks load twice).
    first, second = load_library([str(path)]), load_library([str(path)])
    assert [cpp_autograd.uses_cpp(first, op) for op in second.ops] == \
        [cpp_autograd.uses_cpp(second, op) for op in second.ops] == [False] * len(second.ops)



def test_overload_is_looked_up_by_name_and_overload(tmp_path: Path) -> None:
    """The Autograd kernel finds an overload as `findSchemaOrThrow("ns::name", "overload")` (a
    name with the overload in it names no schema, and the kernel would throw on every call)."""
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: ovl\nops:\n"
                    "  - func: shrink.lo(Tensor self, float lambd=0.5) -> Tensor\n"
                    "    dispatch: {CPU: shrink_lo_cpu}\n"
                    "    fake: like(self)\n"
                    "    derivatives:\n"
                    "      self: grad * lambd\n")
    out, diags = _render([str(path)])
    assert not diags.has_errors
    (text,) = out.values()
    assert '.findSchemaOrThrow("ovl::shrink", "lo")' in text
    assert '"ovl::shrink.lo has no forward-mode derivative' in text
    assert 'm.impl("shrink.lo", TORCH_FN(shrink__lo_autograd));' in text


def test_floordiv_and_mod_of_integers_are_carried(tmp_path: Path) -> None:
    """`//` and `%` of ints and SymInts (literals, arguments, sizes, `.numel()`, `.dim()`,
    bindings) take the C++ path through opgen_floordiv / opgen_mod, Python's floor division and
    modulo (c10::SymInt's truncate for concrete values), defined only where a kernel calls them;
    with a float or a Tensor operand the op keeps the Python path, with a note saying so."""
    size0 = ("x_sizes_[c10::maybe_wrap_dim(0, static_cast<int64_t>(x_sizes_.size()), "
             "/*wrap_scalar=*/false)]")
    formulas = {
        "a": ("h = x.size(0) // 2; torch.cat([grad[h:], grad[:h]], 0)",
              [f"  auto h = opgen_floordiv({size0}, c10::SymInt(2));",
               "  grad_inputs[0] = at::cat(std::vector<at::Tensor>{grad.index({"
               "at::indexing::Slice(h)}), grad.index({at::indexing::Slice(std::nullopt, h)})}, "
               "0);"]),
        "b": ("grad * (k // -3) * (k % n)",
              ["  grad_inputs[0] = ((grad * at::Scalar(opgen_floordiv(k, (-3)))) * "
               "at::Scalar(opgen_mod(c10::SymInt(k), n)));"]),
        "c": ("grad[:-(-x.shape[0] // n)] * (x.numel() % 4) * (x.dim() % k)",
              ["  grad_inputs[0] = ((grad.index({at::indexing::Slice(std::nullopt, "
               "(-opgen_floordiv((-x.sym_size(0)), n)))}) * at::Scalar(opgen_mod("
               "x.sym_numel(), c10::SymInt(4)))) * at::Scalar(opgen_mod(x.dim(), k)));"]),
    }
    notes = {"d": ("grad * (x.size(0) // w)", "// with a float operand"),
             "e": ("grad * (k % 2.0)", "% with a float operand"),
             "f": ("grad * (x % 2)", "% on a Tensor"),
             "g": ("grad // 2", "// on a Tensor")}
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: fdm\nops:\n" + "".join(
        f"  - func: {name}(Tensor x, SymInt n, int k, float w) -> Tensor\n"
        f"    dispatch: {{CPU: {name}_cpu}}\n"
        "    fake: like(x)\n"
        "    derivatives:\n"
        f"      x: {formula}\n" for name, (formula, _) in {**formulas, **notes}.items()))
    lib = load_library([str(path)])
    for op in lib.ops:
        name = op.name.name
        if name in notes:
            assert cpp_autograd.reason(lib, op) == (
                f"its formulas use {notes[name][1]}, which the C++ translation does not carry")
            continue
        assert cpp_autograd.reason(lib, op) is None, (op.name, cpp_autograd.reason(lib, op))
        plan = cpp_autograd.plan(lib, op)
        assert plan is not None
        body = "\n".join(plan.body)
        assert "\n".join(formulas[name][1]) in body, body
    # The helpers are defined where a kernel calls them, and only there.
    project = config.default_project(ROOT)
    (source,) = cpp_autograd.generate(lib, Diagnostics(), project).values()
    assert source.count("opgen_floordiv(int64_t a, int64_t b) {") == 1
    assert source.count("opgen_mod(const c10::SymInt& a, const c10::SymInt& b) {") == 1
    # A namespace calling // only defines opgen_floordiv; one calling neither, neither.
    for ns, formula, defined in (("fdo", formulas["a"][0], {"opgen_floordiv"}),
                                 ("fdn", "grad * x.size(0)", set())):
        other = tmp_path / f"{ns}.yaml"
        other.write_text(f"namespace: {ns}\nops:\n  - func: a(Tensor x) -> Tensor\n"
                         "    dispatch: {CPU: a_cpu}\n    fake: like(x)\n"
                         f"    derivatives:\n      x: {formula}\n")
        (source,) = cpp_autograd.generate(load_library([str(other)]), Diagnostics(),
                                          project).values()
        assert {h for h in ("opgen_floordiv", "opgen_mod") if h in source} == defined
        assert ("#include <limits>" in source) == bool(defined)   # for opgen_floordiv


@pytest.mark.slow
def test_golden_autograd_compiles(tmp_path: Path, monkeypatch) -> None:
    """The translator's output is valid C++ over ATen, free of warnings (-Werror)."""
    monkeypatch.chdir(ROOT)
    from codegen import toolchain as tc

    out, _ = _render([INPUT])
    (source,) = out.values()
    src = tmp_path / "autograd.cpp"
    src.write_text(source)
    toolchain = tc.make_toolchain(tc.toolchain_key()).text
    cflags = shlex.split(tc.toolchain_var(toolchain, "cflags") or "")
    cxx = shlex.split(tc.toolchain_var(toolchain, "cxx") or "c++")
    proc = subprocess.run([*cxx, *cflags, "-Werror", "-fsyntax-only", str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]


KEYWORDS_OPS = """\
namespace: kwag
ops:
  - func: center(Tensor self, int dim=-1) -> Tensor
    dispatch: {CPU: center_cpu}
    fake: like(self)
    derivatives:
      self: grad - grad.mean(dim, keepdim=True)
  - func: total(Tensor self, int dim) -> Tensor
    dispatch: {CPU: total_cpu}
    fake: reduce(self, dim)
    derivatives:
      self: grad.unsqueeze(dim).expand_as(self) * torch.sum(self, dim=dim, keepdim=True).sign()
  - func: squash(Tensor x, float limit=1.0) -> Tensor
    dispatch: {CPU: squash_cpu}
    fake: like(x)
    derivatives:
      x: squash_backward(grad, limit=limit, x=x)
  - func: squash_backward(Tensor grad_output, Tensor x, float limit) -> Tensor
    dispatch: {CPU: squash_backward_cpu}
    fake: broadcast(grad_output, x)
    derivatives:
      grad_output: squash_backward(grad, x, limit)
      x: t = torch.tanh(x / limit); -2 / limit * grad * grad_output * t * (1 - t * t)
  - func: tile_rows(Tensor self, SymInt n) -> Tensor
    dispatch: {CPU: tile_rows_cpu}
    fake: empty([self.size(0) * n, self.size(1)])
    derivatives:
      self: tile_rows_backward(grad, n, self.size(-2))
  - func: tile_rows_backward(Tensor grad, SymInt n, SymInt rows) -> Tensor
    dispatch: {CPU: tile_rows_backward_cpu}
    fake: empty([rows, grad.size(1)])
    derivatives:
      grad: tile_rows(grads[0], n)
"""
KEYWORDS_KERNELS = """\
#include <ATen/ATen.h>
#include <kwag/ops.h>

namespace kwag {

at::Tensor center_cpu(const at::Tensor& self, int64_t dim) {
  return self - self.mean(dim, true);
}
at::Tensor total_cpu(const at::Tensor& self, int64_t dim) { return self.sum(dim).abs(); }
at::Tensor squash_cpu(const at::Tensor& x, double limit) { return limit * at::tanh(x / limit); }
at::Tensor squash_backward_cpu(const at::Tensor& grad_output, const at::Tensor& x, double limit) {
  auto t = at::tanh(x / limit);
  return grad_output * (1 - t * t);
}
at::Tensor tile_rows_cpu(const at::Tensor& self, c10::SymInt n) {
  return self.repeat({n.expect_int(), 1});
}
at::Tensor tile_rows_backward_cpu(const at::Tensor& grad, c10::SymInt n, c10::SymInt rows) {
  return grad.reshape({n.expect_int(), rows.expect_int(), -1}).sum(0);
}

}  // namespace kwag
"""
KEYWORDS_CHECK = """\
import torch
import runtime  # noqa: F401  (loads the built library)
from torch.autograd import gradcheck, gradgradcheck

x = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
for f in (lambda t: torch.ops.kwag.center(t, 0), lambda t: torch.ops.kwag.center(t),
          lambda t: torch.ops.kwag.total(t, 1), lambda t: torch.ops.kwag.squash(t, 2.0)):
    assert gradcheck(f, (x,)), f
    assert gradgradcheck(f, (x,)), f
# C++ Nodes, not Python autograd.Functions, carry the graph.
for op in (torch.ops.kwag.center(x), torch.ops.kwag.total(x, 1), torch.ops.kwag.squash(x)):
    assert type(op.grad_fn).__name__ == "CppFunction", type(op.grad_fn)
    assert op.grad_fn.name() in ("CenterBackward", "TotalBackward", "SquashBackward"), \
        op.grad_fn.name()
# SymInt arguments and sizes pass to SymInt parameters, also with dynamic shapes.
t = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
tile = lambda u: torch.ops.kwag.tile_rows(u, 2)
assert gradcheck(tile, (t,)) and gradgradcheck(tile, (t,))
assert tile(t).grad_fn.name() == "TileRowsBackward", tile(t).grad_fn.name()
torch.compile(tile, dynamic=True, fullgraph=True)(t).sum().backward()
assert torch.equal(t.grad, torch.full_like(t, 2.0)), t.grad
print("ok")
"""


@pytest.mark.slow
def test_keywords_and_symints_take_the_cpp_path_and_differentiate(tmp_path: Path) -> None:
    """Keyword arguments of library ops (any order), the `dim`/`keepdim` of `sum`/`mean`, and
    SymInt arguments and `t.size(i)` passed to SymInt parameters (torchvision's roi_align
    backward pattern) are carried to C++, which compiles, and whose gradients pass gradcheck and
    gradgradcheck."""
    from tests import scratch

    root = scratch.make_root(tmp_path, {"ops.yaml": KEYWORDS_OPS},
                             {"kwag/kernels.cpp": KEYWORDS_KERNELS})
    lib = load_library([str(root / "schemas" / "ops.yaml")])
    assert {str(op.name): cpp_autograd.reason(lib, op) for op in lib.ops
            if op.derivatives is not None} == {
        "kwag::center": None, "kwag::total": None, "kwag::squash": None,
        "kwag::squash_backward": None, "kwag::tile_rows": None, "kwag::tile_rows_backward": None}
    for step in (scratch.generate, scratch.build):
        proc = step(root)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = scratch.python(root, KEYWORDS_CHECK)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr




FOREACH_OPS = """\
namespace: fecpp
ops:
  - func: _foreach_mul.Scalar(Tensor[] self, Scalar scalar) -> Tensor[]
    dispatch: {CPU: mul_cpu}
    fake: "[like(t) for t in self]"
    derivatives:
      self: "[g * scalar for g in grad]"
  - func: _foreach_mul_.Scalar(Tensor(a!)[] self, Scalar scalar) -> ()
    dispatch: {CPU: mul_cpu_}
  - func: _foreach_addcmul.Scalar(Tensor[] self, Tensor[] tensor1, Tensor[] tensor2, Scalar value=1) -> Tensor[]
    dispatch: {CPU: addcmul_cpu}
    fake: "[like(t) for t in self]"
    derivatives:
      self: "[g * 1 + 0 * s for g, s in zip(grad, self)]"
      tensor1: "[g * t2 * value for g, t2 in zip(grad, tensor2)]"
      tensor2: "[g * t1 * value for g, t1 in zip(grad, tensor1)]"
  - func: _foreach_addcmul_.Scalar(Tensor(a!)[] self, Tensor[] tensor1, Tensor[] tensor2, Scalar value=1) -> ()
    dispatch: {CPU: addcmul_cpu_}
"""
FOREACH_KERNELS = """\
#include <ATen/ATen.h>
#include <fecpp/ops.h>

namespace fecpp {

std::vector<at::Tensor> mul_cpu(at::TensorList self, const at::Scalar& scalar) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : self) out.push_back(t * scalar);
  return out;
}
void mul_cpu_(at::TensorList self, const at::Scalar& scalar) {
  for (const at::Tensor& t : self) t.mul_(scalar);
}
std::vector<at::Tensor> addcmul_cpu(at::TensorList self, at::TensorList tensor1,
                                    at::TensorList tensor2, const at::Scalar& value) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < self.size(); ++i) out.push_back(self[i].addcmul(tensor1[i], tensor2[i], value));
  return out;
}
void addcmul_cpu_(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,
                  const at::Scalar& value) {
  for (size_t i = 0; i < self.size(); ++i) self[i].addcmul_(tensor1[i], tensor2[i], value);
}

}  // namespace fecpp
"""
FOREACH_CHECK = """\
import torch
import runtime  # noqa: F401  (loads the built library)

for name in ("fecpp::_foreach_mul_.Scalar", "fecpp::_foreach_addcmul_.Scalar"):
    autograd = [line for line in torch._C._dispatch_dump(name).splitlines()
                if line.startswith("Autograd")]
    assert len(autograd) == 1 and "cpp/fecpp/autograd.cpp" in autograd[0], autograd
ops = torch.ops.fecpp

def step(mul_, addcmul_, a, b, c):
    xs = [a * 1.0, b * 1.0]
    mul_(xs, 3.0)
    addcmul_(xs, [c, c], [a, b], 0.5)
    return (xs[0] * xs[1]).sum()

mine = (ops._foreach_mul_.Scalar, ops._foreach_addcmul_.Scalar)
aten = (torch._foreach_mul_, torch._foreach_addcmul_)
args = [torch.randn(4, dtype=torch.double, requires_grad=True) for _ in range(3)]
expected = torch.autograd.grad(step(*aten, *args), args)
torch.testing.assert_close(torch.autograd.grad(step(*mine, *args), args), expected)
compiled = torch.compile(lambda *a: step(*mine, *a), backend="aot_eager", fullgraph=True)
torch.testing.assert_close(torch.autograd.grad(compiled(*args), args), expected)
torch.testing.assert_close(
    torch.func.grad(lambda a: step(*mine, a, *args[1:]))(args[0].detach()), expected[0])
assert torch.autograd.gradcheck(lambda *a: step(*mine, *a), args)
try:
    ops._foreach_mul_.Scalar([args[0]], 2.0)
    raise AssertionError("an in-place write to a leaf that requires grad")
except RuntimeError as e:
    assert "a leaf Variable that requires grad" in str(e), e
y = torch.ones(3)
before = y._version
ops._foreach_mul_.Scalar([y], 2.0)
assert y.tolist() == [2.0] * 3 and y._version == before + 1
print("ok")
"""


@pytest.mark.e2e
def test_inplace_list_ops_differentiate_through_their_functional_variant(tmp_path: Path) -> None:
    """aten's foreach pattern, `_foreach_mul_(Tensor(a!)[] self, Scalar scalar) -> ()` beside
    `_foreach_mul(Tensor[] self, Scalar scalar) -> Tensor[]` with derivatives: the in-place op's
    C++ Autograd kernel runs the functional op and copies into each tensor of `self` (a clone
    of `self` goes to the functional op when its formulas read it), giving aten's gradients
    eagerly, compiled and under torch.func.grad. Before, it raised that it has no derivatives."""
    from tests import scratch

    root = scratch.make_root(tmp_path, {"ops.yaml": FOREACH_OPS},
                             {"fecpp/kernels.cpp": FOREACH_KERNELS})
    lib = load_library([str(root / "schemas" / "ops.yaml")])
    ops = {str(op.name): op for op in lib.ops}
    assert cpp_autograd.through_functional(lib, ops["fecpp::_foreach_mul_.Scalar"]) == \
        ("inplace_list", ops["fecpp::_foreach_mul.Scalar"])
    assert cpp_autograd.mutating_in_cpp(lib, ops["fecpp::_foreach_addcmul_.Scalar"])
    for step in (scratch.generate, scratch.build):
        proc = step(root)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (root / "generated" / "cpp" / "fecpp" / "autograd.cpp").read_text()
    assert "opgen_v.push_back(opgen_t.clone())" in text     # addcmul's formulas read self
    proc = scratch.python(root, FOREACH_CHECK)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr

# Arguments and bindings named like what the generated C++ uses: namespaces (`at`, `std`, `c10`,
# `torch`), apply's parameter and locals (`grads`, `grad_inputs`, `lock`), the Node members it calls
# (`task_should_compute_output`, `input_metadata`, `getptr`), `size_t`, and the node's own members
# (`x_saved_`, `xs_count_`, a binding `getptr_saved_`).
CLASH_OPS = """\
namespace: hcpp
ops:
  - func: ns_op(Tensor at, Tensor std, float c10, Tensor torch) -> Tensor
    dispatch: {CPU: ns_op_cpu}
    fake: broadcast(at, std)
    derivatives:
      at: grad * std * c10 * torch.sum()
      std: grad * at * c10 * torch.sum()
      torch: ((grad * at * std).sum() * c10).expand(torch.shape)
  - func: locals_op(Tensor grads, Tensor grad_inputs, Tensor lock, Tensor task_should_compute_output, Tensor input_metadata, Tensor size_t) -> Tensor
    dispatch: {CPU: locals_op_cpu}
    fake: like(grads)
    derivatives:
      grads, grad_inputs: 'getptr = grad * 2; (getptr * grad_inputs, getptr * grads)'
      lock: grad * task_should_compute_output * input_metadata * size_t
      task_should_compute_output: grad * lock * input_metadata * size_t
      input_metadata: grad * lock * task_should_compute_output * size_t
      size_t: grad * lock * task_should_compute_output * input_metadata
  - func: members_op(Tensor x, Tensor x_saved_, Tensor[] xs, Tensor xs_count_, Tensor getptr) -> Tensor
    dispatch: {CPU: members_op_cpu}
    fake: like(x)
    derivatives:
      x: getptr_saved_ = grad * x_saved_; getptr_saved_ * getptr + 0 * result
      x_saved_: grad * x * getptr
      xs: '[grad * xs_count_ + 0 * out for out in xs]'
      xs_count_: grad * (xs[0] + xs[1])
      getptr: grad * x * x_saved_
"""
CLASH_KERNELS = """\
#include <ATen/ATen.h>
#include <hcpp/ops.h>

namespace hcpp {

at::Tensor ns_op_cpu(const at::Tensor& a, const at::Tensor& s, double c, const at::Tensor& t) {
  return a * s * c * t.sum();
}
at::Tensor locals_op_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                         const at::Tensor& d, const at::Tensor& e, const at::Tensor& f) {
  return a * b * 2 + c * d * e * f;
}
at::Tensor members_op_cpu(const at::Tensor& x, const at::Tensor& y, at::TensorList xs,
                          const at::Tensor& c, const at::Tensor& g) {
  auto out = x * y * g;
  for (const auto& t : xs) {
    out = out + t * c;
  }
  return out;
}

}  // namespace hcpp
"""
CLASH_CHECK = """\
import torch
import runtime  # noqa: F401  (loads the built library)
from torch.autograd import gradcheck, gradgradcheck

ops = torch.ops.hcpp
calls = {
    "NsOpBackward": (ops.ns_op, 4, {2: 3.0}),
    "LocalsOpBackward": (ops.locals_op, 6, {}),
    "MembersOpBackward": (lambda x, y, a, b, c, g: ops.members_op(x, y, [a, b], c, g), 6, {}),
}
for name, (f, n, fixed) in calls.items():
    args = tuple(fixed.get(i, torch.randn(3, dtype=torch.double, requires_grad=True))
                 for i in range(n))
    out = f(*args)
    assert type(out.grad_fn).__name__ == "CppFunction" and out.grad_fn.name() == name, \\
        (name, out.grad_fn)
    assert gradcheck(f, args), name
    assert gradgradcheck(f, args), name
print("ok")
"""


@pytest.mark.slow
def test_arguments_named_like_generated_cpp_take_the_cpp_path(tmp_path: Path) -> None:
    """An op whose arguments are named like the namespaces, locals and members the generated C++
    uses gets C++ autograd (it kept the Python path, with a note, or did not compile): the
    namespaces are always qualified, and apply's locals for the inputs and the bindings are named
    apart from its own names and the node's members. It compiles, and its gradients pass
    gradcheck and gradgradcheck."""
    from tests import scratch

    root = scratch.make_root(tmp_path, {"ops.yaml": CLASH_OPS},
                             {"hcpp/kernels.cpp": CLASH_KERNELS})
    lib = load_library([str(root / "schemas" / "ops.yaml")])
    assert {str(op.name): cpp_autograd.reason(lib, op) for op in lib.ops} == {
        "hcpp::ns_op": None, "hcpp::locals_op": None, "hcpp::members_op": None}
    for step in (scratch.generate, scratch.build):
        proc = step(root)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = scratch.python(root, CLASH_CHECK)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_argument_with_the_generated_prefix_keeps_python(tmp_path: Path) -> None:
    """An argument named `opgen_*` keeps the Python path, with a note saying why: the Autograd
    kernel's parameters are the arguments, beside its own locals and helpers of that prefix. An
    in-place op differentiated through its functional variant too (its C++ kernel declared
    `opgen_op` again, and did not compile)."""
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: pfx\nops:\n"
                    "  - func: f(Tensor x, float opgen_op) -> Tensor\n"
                    "    dispatch: {CPU: f_cpu}\n    fake: like(x)\n"
                    "    derivatives:\n      x: grad * opgen_op\n"
                    "  - func: f_(Tensor(a!) x, float opgen_op) -> Tensor(a!)\n"
                    "    dispatch: {CPU: f__cpu}\n")
    out, diags = _render([str(path)])
    why = ("its Autograd kernel stays in Python: argument 'opgen_op' starts with 'opgen_', the "
           "prefix of the names the generated C++ declares beside the op's arguments")
    assert [(d.loc.line, d.message, d.hint) for d in diags.items] == [
        (7, f"pfx::f: {why}", "a C++ program linking the library cannot differentiate this op"),
        (8, f"pfx::f_: {why}", "a C++ program linking the library runs the op without it")]
    assert out == {}    # both Autograd kernels are Python (py_autograd, py_functionalize)

def test_builtin_call_note_names_the_builtin(tmp_path: Path) -> None:
    """A Python builtin called in a formula (`int`, `abs`) is named in the note; it said 'this
    form of call', which did not tell the author what to rewrite."""
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: trb\nops:\n"
                    "  - func: wsum(Tensor[] tensors, Tensor weights) -> Tensor\n"
                    "    dispatch: {CPU: wsum_cpu}\n"
                    "    fake: like(tensors[0])\n"
                    "    derivatives:\n"
                    "      tensors: '[grad * int(t.size(0) / 2) for t in tensors]'\n"
                    "      weights: non_differentiable\n"
                    "  - func: nrm(Tensor self) -> Tensor\n"
                    "    dispatch: {CPU: nrm_cpu}\n"
                    "    fake: like(self)\n"
                    "    derivatives:\n"
                    "      self: grad * abs(self)\n")
    _, diags = _render([str(path)])
    assert [d.message for d in diags.items] == [
        "trb::wsum: its Autograd kernel stays in Python: its formulas use the builtin int(), "
        "which the C++ translation does not carry",
        "trb::nrm: its Autograd kernel stays in Python: its formulas use the builtin abs(), "
        "which the C++ translation does not carry"]


# The same ops in two namespaces, `ctr` on the C++ path and `ptr` (`autograd: python`) on the
# Python one, so that one build compares them.
INDEXING_OPS = """\
namespace: {ns}
{setting}ops:
  - func: mean_rows(Tensor self) -> Tensor
    dispatch: {{CPU: mean_rows_cpu}}
    fake: reduce(self, 0)
    derivatives:
      self: (grad / self.size(0))[None].expand(self.shape)
  - func: scale_count(Tensor self, SymInt n, float w) -> Tensor
    dispatch: {{CPU: scale_count_cpu}}
    fake: like(self)
    derivatives:
      self: grad * (1 / (n + 1)) * (self.numel() * 0.5) * (w / self.shape[-1]) if n > 1 else -grad
  - func: head(Tensor self, SymInt n) -> Tensor
    dispatch: {{CPU: head_cpu}}
    fake: empty([self.size(0), n])
    derivatives:
      self: torch.cat([grad, torch.zeros_like(self[..., n:])], -1)
  - func: rowdiff(Tensor self) -> Tensor
    dispatch: {{CPU: rowdiff_cpu}}
    fake: empty([self.size(0) - 1, self.size(1)])
    derivatives:
      self: torch.cat((-grad[:1], grad[:-1] - grad[1:], grad[-1:]), dim=0)
  - func: shift_mul(Tensor self) -> Tensor
    dispatch: {{CPU: shift_mul_cpu}}
    fake: empty([self.size(0), self.size(1) - 1])
    derivatives:
      self: z = grad[:, :1] * 0; torch.cat([z, grad * self[:, :-1]], 1) + torch.cat([grad * self[:, 1:], z], 1)
  - func: stack3(Tensor self) -> Tensor
    dispatch: {{CPU: stack3_cpu}}
    fake: empty([3, self.size(0), self.size(1)])
    derivatives:
      self: grad[0] + 2 * grad[1] + 3 * grad[-1]
  - func: pairs(Tensor self) -> Tensor
    dispatch: {{CPU: pairs_cpu}}
    fake: empty([self.size(0) * 2, self.size(1)])
    derivatives:
      self: grad[::2] + grad[1::2]
  - func: roll_half(Tensor self, SymInt k) -> Tensor
    dispatch: {{CPU: roll_half_cpu}}
    fake: like(self)
    derivatives:
      self: m = -(-self.size(0) // 2); torch.cat([grad[m:], grad[:m]], 0) * (k // -3 + k % -4 + self.numel() % k + self.dim() // -3 + (self.dim() - 5) % 4)
"""
INDEXING_KERNELS = """\
#include <ATen/ATen.h>
#include <cmath>
#include <{ns}/{ns}.h>

namespace {ns} {{

at::Tensor mean_rows_cpu(const at::Tensor& self) {{ return self.mean(0); }}
at::Tensor scale_count_cpu(const at::Tensor& self, c10::SymInt n, double w) {{
  auto k = n.expect_int();
  if (k <= 1) return -self;
  return self * (1.0 / static_cast<double>(k + 1) * (static_cast<double>(self.numel()) * 0.5) *
                 (w / static_cast<double>(self.size(-1))));
}}
at::Tensor head_cpu(const at::Tensor& self, c10::SymInt n) {{
  return self.narrow(-1, 0, n.expect_int()).clone();
}}
at::Tensor rowdiff_cpu(const at::Tensor& self) {{ return self.slice(0, 1) - self.slice(0, 0, -1); }}
at::Tensor shift_mul_cpu(const at::Tensor& self) {{
  return self.slice(1, 1) * self.slice(1, 0, -1);
}}
at::Tensor stack3_cpu(const at::Tensor& self) {{ return at::stack({{self, self * 2, self * 3}}); }}
at::Tensor pairs_cpu(const at::Tensor& self) {{ return self.repeat_interleave(2, 0); }}
// Python's // and % computed apart from the generated helpers: cat(self[h:], self[:h]), h = n // 2,
// scaled by the formula's integer.
at::Tensor roll_half_cpu(const at::Tensor& self, c10::SymInt k) {{
  auto div = [](int64_t a, int64_t b) {{
    return static_cast<int64_t>(std::floor(static_cast<double>(a) / static_cast<double>(b)));
  }};
  auto mod = [&](int64_t a, int64_t b) {{ return a - b * div(a, b); }};
  const int64_t kk = k.expect_int(), h = self.size(0) / 2, d = self.dim();
  const int64_t c = div(kk, -3) + mod(kk, -4) + mod(self.numel(), kk) + div(d, -3) + mod(d - 5, 4);
  return at::cat({{self.slice(0, h), self.slice(0, 0, h)}}, 0) * c;
}}

}}  // namespace {ns}
"""
INDEXING_CHECK = """\
import torch
import runtime  # noqa: F401  (loads the built library)
from torch._dynamo.testing import CompileCounterWithBackend
from torch.autograd import gradcheck, gradgradcheck

cases = {  # op -> a call of it, and the (input, int argument)s it is differentiated at
    "mean_rows": (lambda ns, t, n: ns.mean_rows(t), [((4, 5), 0), ((6, 3), 0)]),
    "scale_count": (lambda ns, t, n: ns.scale_count(t, n, 0.7), [((3, 4), 3), ((5, 2), 6)]),
    "head": (lambda ns, t, n: ns.head(t, n), [((3, 6), 4), ((4, 7), 2)]),
    "rowdiff": (lambda ns, t, n: ns.rowdiff(t), [((5, 3), 0), ((7, 2), 0)]),
    "shift_mul": (lambda ns, t, n: ns.shift_mul(t), [((3, 5), 0), ((2, 6), 0)]),
    "stack3": (lambda ns, t, n: ns.stack3(t), [((3, 4), 0), ((5, 2), 0)]),
    "pairs": (lambda ns, t, n: ns.pairs(t), [((3, 4), 0), ((5, 2), 0)]),
    # an odd and an even number of rows, a positive and a negative k (7 % -4 == -1, 12 % -5 == -3)
    "roll_half": (lambda ns, t, n: ns.roll_half(t, n), [((5, 3), 7), ((6, 2), -5)]),
}
cpp, python = torch.ops.ctr, torch.ops.ptr
for name, (call, points) in cases.items():
    node = "".join(p.capitalize() for p in name.split("_")) + "Backward"
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(lambda t, n: call(cpp, t, n), backend=counter, dynamic=True,
                             fullgraph=True)
    for k, (shape, n) in enumerate(points):
        x = torch.randn(shape, dtype=torch.double, generator=torch.Generator().manual_seed(k),
                        requires_grad=True)
        # The C++ Node carries the graph; the other namespace's op is an autograd.Function.
        assert call(cpp, x, n).grad_fn.name() == node, (name, call(cpp, x, n).grad_fn.name())
        assert type(call(python, x, n).grad_fn).__name__ != "CppFunction", name
        assert gradcheck(lambda t: call(cpp, t, n), (x,)), name
        assert gradgradcheck(lambda t: call(cpp, t, n), (x,)), name
        out = call(cpp, x, n)
        g = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(9))
        (on_cpp,) = torch.autograd.grad(out, x, g)
        (on_python,) = torch.autograd.grad(call(python, x, n), x, g)
        assert torch.equal(on_cpp, on_python), (name, on_cpp, on_python)
        # Under dynamic shapes the backward is traced with symbolic sizes: the same gradient,
        # and one graph for both points (nothing specialized).
        (on_compiled,) = torch.autograd.grad(compiled(x, n), x, g)
        assert torch.allclose(on_compiled, on_cpp), (name, on_compiled, on_cpp)
    assert counter.frame_count == 1, (name, counter.frame_count)
print("ok")
"""


@pytest.mark.slow
def test_symbolic_numbers_cat_and_indexing_take_the_cpp_path(tmp_path: Path) -> None:
    """Arithmetic of SymInt sizes and arguments with ints and floats (true division included),
    `.numel()`, `.shape[i]`, `torch.cat`, indexing (integers, negative ones, slices with
    negative, SymInt and missing bounds and steps, `...`, `None`), and `//` and `%` of integers
    (negative operands included) are carried to C++: gradients
    pass gradcheck and gradgradcheck, equal those of the Python path exactly, and are the same
    under torch.compile with dynamic shapes, without specializing them."""
    _check_beside_python(tmp_path, INDEXING_OPS, INDEXING_KERNELS, INDEXING_CHECK, "ctr", "ptr",
                         ("mean_rows", "scale_count", "head", "rowdiff", "shift_mul", "stack3",
                          "pairs", "roll_half"))


NO_GRADIENT_KERNELS = """\
#include <ATen/ATen.h>
#include <nograd/ops.h>

namespace nograd {

void rms_norm_cpu(at::Tensor& result, const at::Tensor& input, const at::Tensor& weight,
                  double epsilon) {
  at::NoGradGuard no_grad;  // a kernel autograd sees nothing of
  result.copy_(input * at::rsqrt(input.pow(2).mean(-1, true) + epsilon) * weight);
}
void fill_cpu(at::Tensor& self, double value) {
  at::NoGradGuard no_grad;
  self.fill_(value);
}

}  // namespace nograd
"""


@pytest.mark.slow
def test_cpp_ops_writing_arguments_without_derivatives_refuse_gradients(tmp_path: Path) -> None:
    """The C++ Autograd kernels of ops writing to their arguments without derivatives raise
    when an argument requires grad, and run below autograd otherwise (the Python path's test,
    tests/test_py_autograd.py, checks the same)."""
    from tests import scratch
    from tests.test_py_autograd import NO_GRADIENT_OPS

    ops = textwrap.dedent(NO_GRADIENT_OPS).replace('"ng_kernels:rms_norm"', "rms_norm_cpu") \
        .replace('"ng_kernels:fill_"', "fill_cpu").replace("CompositeExplicitAutograd", "CPU")
    root = scratch.make_root(tmp_path, {"ops.yaml": ops},
                             {"nograd/kernels.cpp": NO_GRADIENT_KERNELS})
    for step in (scratch.generate, scratch.build):
        proc = step(root)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (root / "generated" / "cpp" / "nograd" / "autograd.cpp").exists()
    proc = scratch.python(root, "import torch, runtime\n"
                                "from tests.test_py_autograd import check_no_gradient\n"
                                "check_no_gradient(torch.ops.nograd)\nprint('ok')\n")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


NESTED_KERNELS = """\
#include <ATen/ATen.h>
#include <nestgrad/ops.h>

namespace nestgrad {

void scale_lists_cpu(at::Tensor& noop_flag, const std::vector<std::vector<at::Tensor>>& lists,
                     double s) {
  at::NoGradGuard no_grad;  // a kernel autograd sees nothing of
  for (size_t i = 0; i < lists[0].size(); ++i) lists[1][i].copy_(lists[0][i] * s);
}

}  // namespace nestgrad
"""


@pytest.mark.e2e
def test_cpp_writes_inside_a_tensor_list_of_lists_are_seen_by_autograd(tmp_path: Path) -> None:
    """apex's `Tensor(b!)[][] tensor_lists`: the C++ Autograd and ADInplaceOrView kernels
    refuse a written Tensor that requires grad and bump each one's version, as the Python path
    does (tests/test_py_autograd.py). Before, they saw Tensor, Tensor? and Tensor[] only."""
    from tests import scratch
    from tests.test_py_autograd import NESTED_OPS

    ops = textwrap.dedent(NESTED_OPS).replace('"nest_kernels:scale_lists"', "scale_lists_cpu") \
        .replace("CompositeExplicitAutograd", "CPU")
    root = scratch.make_root(tmp_path, {"ops.yaml": ops},
                             {"nestgrad/kernels.cpp": NESTED_KERNELS})
    for step in (scratch.generate, scratch.build):
        proc = step(root)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (root / "generated" / "cpp" / "nestgrad" / "autograd.cpp").read_text()
    assert "opgen_flatten(lists)" in text
    proc = scratch.python(root, "import torch, runtime\n"
                                "from tests.test_py_autograd import check_nested_writes\n"
                                "check_nested_writes(torch.ops.nestgrad.scale_lists)\n"
                                "print('ok')\n")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


@pytest.mark.parametrize("schema,words", [
    ("ex::norm(Tensor! result, Tensor input) -> ()", "writes to 'result' and"),
    ("ex::norm(Tensor! result, Tensor input, Tensor(b!)? residual) -> ()",
     "writes to 'result' (and 'residual' where given) and"),
    ("ex::norm(Tensor input, Tensor(a!)? out=None, Tensor(b!)? scale=None) -> ()",
     "writes to 'out', 'scale' where given and"),
])
def test_the_refusal_says_an_optional_written_tensor_is_written_where_given(schema, words):
    """A call may pass None for a `Tensor(a!)?`: the message no longer says it was written."""
    from codegen.diagnostics import Loc
    from codegen.model import Op
    from codegen.parse import parse_schema

    op = Op(schema=parse_schema(schema), loc=Loc("t.yaml", 1, 1))
    assert cpp_autograd.no_gradient_message(op).startswith(f"ex::norm {words} has no derivatives")


PAIR_OPS = """\
namespace: pairag
ops:
  - func: smooth(Tensor x, float beta) -> Tensor
    dispatch: {CPU: smooth_cpu}
    fake: like(x)
    derivatives:
      x: smooth_backward(grad, x, beta)
    samples:
      - {x: {shape: [3, 4]}, beta: 2.0}
  - func: smooth_backward(Tensor grad_out, Tensor x, float beta) -> Tensor
    dispatch: {CPU: smooth_backward_cpu}
    fake: broadcast(grad_out, x)
    samples:
      - {grad_out: {shape: [3, 4]}, x: {shape: [3, 4]}, beta: 2.0}
  # One call gives the gradients of two inputs (flash-attention's backward ops return a tuple).
  # An optional number passes on to the callee's parameter of its type.
  - func: mix(Tensor a, Tensor b, float? w=None) -> Tensor
    dispatch: {CPU: mix_cpu}
    fake: broadcast(a, b)
    derivatives:
      a, b: mix_backward(grad, a, b, w=w)
    samples:
      - {a: {shape: [3, 4]}, b: {shape: [3, 4]}}
      - {a: {shape: [3, 4]}, b: {shape: [3, 4]}, w: 2.5}
  - func: mix_backward(Tensor grad, Tensor a, Tensor b, float? w=None) -> (Tensor, Tensor)
    dispatch: {CPU: mix_backward_cpu}
    fake: (like(a), like(b))
    samples:
      - {grad: {shape: [3, 4]}, a: {shape: [3, 4]}, b: {shape: [3, 4]}}
  # The callee computes indices only: no gradient flows into it, and a second backward is right.
  - func: take_rows(Tensor x, Tensor order) -> Tensor
    dispatch: {CPU: take_rows_cpu}
    fake: like(x)
    derivatives:
      x: grad.index_select(0, inverse(order))
      order: non_differentiable
    samples:
      - {x: {shape: [3, 2]}, order: {values: [2, 0, 1]}}
  - func: inverse(Tensor order) -> Tensor
    dispatch: {CPU: inverse_cpu}
    fake: like(order)
    samples:
      - {order: {values: [2, 0, 1]}}
  # causal-conv1d's pair: the backward gives `Tensor? dbias`, and takes the optional bias, None
  # where the forward had none (its kernel tests has_value()).
  - func: affine(Tensor x, Tensor w, Tensor? bias=None) -> Tensor
    dispatch: {CPU: affine_cpu}
    fake: broadcast(x, w)
    derivatives:
      x, w, bias: affine_backward(grad, x, w, bias)
    samples:
      - {x: {shape: [3, 4]}, w: {shape: [4]}}
      - {x: {shape: [3, 4]}, w: {shape: [4]}, bias: {shape: [4]}}
  - func: affine_backward(Tensor grad, Tensor x, Tensor w, Tensor? bias) -> (Tensor, Tensor, Tensor?)
    dispatch: {CPU: affine_backward_cpu}
    fake: (like(x), like(w), like(bias) if bias is not None else None)
    samples:
      - {grad: {shape: [3, 4]}, x: {shape: [3, 4]}, w: {shape: [4]}, bias: {shape: [4]}}
"""
PAIR_KERNELS = """\
#include <ATen/ATen.h>
#include <pairag/ops.h>

namespace pairag {

at::Tensor smooth_cpu(const at::Tensor& x, double beta) { return at::softplus(x, beta); }
at::Tensor smooth_backward_cpu(const at::Tensor& grad_out, const at::Tensor& x, double beta) {
  return grad_out * at::sigmoid(x * beta);
}
at::Tensor mix_cpu(const at::Tensor& a, const at::Tensor& b, std::optional<double> w) {
  return at::sin(a) * b * w.value_or(1.0);
}
std::tuple<at::Tensor, at::Tensor> mix_backward_cpu(const at::Tensor& grad, const at::Tensor& a,
                                                    const at::Tensor& b, std::optional<double> w) {
  return {grad * at::cos(a) * b * w.value_or(1.0), grad * at::sin(a) * w.value_or(1.0)};
}
at::Tensor take_rows_cpu(const at::Tensor& x, const at::Tensor& order) {
  return x.index_select(0, order);
}
at::Tensor inverse_cpu(const at::Tensor& order) { return at::argsort(order); }
at::Tensor affine_cpu(const at::Tensor& x, const at::Tensor& w,
                      const std::optional<at::Tensor>& bias) {
  return bias.has_value() ? x * w + *bias : x * w;
}
std::tuple<at::Tensor, at::Tensor, std::optional<at::Tensor>> affine_backward_cpu(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& w,
    const std::optional<at::Tensor>& bias) {
  std::optional<at::Tensor> dbias;
  if (bias.has_value()) {
    dbias = grad.sum(0) + bias->new_zeros(bias->sizes());
  }
  return {grad * w, (grad * x).sum(0), dbias};
}

}  // namespace pairag
"""
PAIR_CHECK = """\
import torch
import runtime  # noqa: F401  (loads the built library)
from torch.autograd import gradcheck

x = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
f = lambda t: torch.ops.pairag.smooth(t, 2.0)
assert gradcheck(f, (x,))
y = f(x)
assert type(y.grad_fn).__name__ == "CppFunction" and y.grad_fn.name() == "SmoothBackward"
(g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
torch.testing.assert_close(g, torch.sigmoid(2 * x))
try:
    torch.autograd.grad(g.sum(), x)
except RuntimeError as e:
    assert "derivative for pairag::smooth_backward is not implemented" in str(e), e
else:
    raise AssertionError("a second backward ran")
torch.compile(f, fullgraph=True)(x).sum().backward()
torch.testing.assert_close(x.grad, torch.sigmoid(2 * x.detach()))
a = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
b = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
assert gradcheck(torch.ops.pairag.mix, (a, b))
assert gradcheck(lambda u, v: torch.ops.pairag.mix(u, v, 2.5), (a, b))
assert torch.ops.pairag.mix(a, b).grad_fn.name() == "MixBackward"
ga, gb = torch.autograd.grad(torch.ops.pairag.mix(a, b).sum(), (a, b), create_graph=True)
try:
    torch.autograd.grad((ga.sum(), gb.sum()), (a, b))
except RuntimeError as e:
    assert "derivative for pairag::mix_backward is not implemented" in str(e), e
else:
    raise AssertionError("a second backward ran")
w = torch.randn(4, dtype=torch.double, requires_grad=True)
c = torch.randn(4, dtype=torch.double, requires_grad=True)
assert torch.ops.pairag.affine(a, w).grad_fn.name() == "AffineBackward"
assert gradcheck(torch.ops.pairag.affine, (a, w))
assert gradcheck(torch.ops.pairag.affine, (a, w, c))
print("ok")
"""


@pytest.mark.slow
def test_a_formula_calling_an_op_without_derivatives_takes_the_cpp_path(tmp_path: Path) -> None:
    """flash-attention's and xformers' forward/backward pairs: the backward op has C++ kernels
    and no derivatives, so torch's not-implemented kernel (Note [C++ autograd]) names it on a
    second backward, and the forward op's Autograd kernel is C++. It stayed in Python."""
    from tests import scratch

    root = scratch.make_root(tmp_path, {"ops.yaml": PAIR_OPS},
                             {"pairag/kernels.cpp": PAIR_KERNELS})
    lib = load_library([str(root / "schemas" / "ops.yaml")])
    ops = {op.name.name: op for op in lib.ops}
    assert cpp_autograd.reason(lib, ops["smooth"]) is None
    assert cpp_autograd.reason(lib, ops["take_rows"]) is None
    assert cpp_autograd.reason(lib, ops["mix"]) is None
    assert cpp_autograd.reason(lib, ops["affine"]) is None
    for step in (scratch.generate, scratch.build):
        proc = step(root)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = scratch.python(root, PAIR_CHECK)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
    # The sample checks expect that error from the second backward, or, where it runs (no
    # gradient flows into take_rows' callee), a second derivative gradgradcheck passes.
    proc = scratch.python(root, "import runtime.testing as T\n"
                                f"for case in T.load_cases({str(root / 'schemas' / 'ops.yaml')!r}):\n"
                                "    T.check_gradients(case)\n"
                                "print('ok')\n")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_none_to_an_optional_tensor_parameter_is_nullopt(tmp_path: Path) -> None:
    """torch_scatter's gather_csr differentiates through segment_sum_csr(grad, indptr, None):
    None for a `Tensor?` parameter is `std::nullopt` (it kept the op on the Python path; and
    `at::Tensor()` would be an optional holding an undefined Tensor, which a kernel takes as
    given)."""
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: trq\nops:\n"
                    "  - func: gather(Tensor src, Tensor indptr, Tensor? out) -> Tensor\n"
                    "    dispatch: {CPU: gather_cpu}\n"
                    "    fake: like(src)\n"
                    "    derivatives:\n"
                    "      src: segment(grad, indptr, None)\n"
                    "      indptr: non_differentiable\n"
                    "      out: non_differentiable\n"
                    "  - func: segment(Tensor src, Tensor indptr, Tensor? out) -> Tensor\n"
                    "    dispatch: {CPU: segment_cpu}\n"
                    "    fake: like(src)\n"
                    "    derivatives:\n"
                    "      src: gather(grad, indptr, out=None)\n"
                    "      indptr: non_differentiable\n"
                    "      out: non_differentiable\n")
    out, diags = _render([str(path)])
    assert [d.message for d in diags.items] == []
    text = "\n".join(out.values())
    assert "().call(grad, indptr, ::std::nullopt)" in text


def test_clamp_with_keywords_and_symbolic_bounds_is_carried(tmp_path: Path) -> None:
    """`clamp(min=...)`, `clamp(max=...)` and a SymInt bound (torch_scatter's segment means,
    torch_sparse's spmm_min) take the C++ path: a missing bound is std::nullopt, as torch's
    Python binding passes it, and a symbolic one a Scalar holding it (it kept the Python path)."""
    formulas = {
        "a": ("grad * x.clamp(min=1)", "(grad * x.clamp(1, ::std::nullopt))"),
        "b": ("grad * x.clamp(max=x.size(0) - 1)",
              "(grad * x.clamp(::std::nullopt, at::Scalar((x.sym_size(0) - 1))))"),
        "c": ("grad * torch.clamp(x, None, 2.5)", "(grad * at::clamp(x, ::std::nullopt, 2.5))"),
        "d": ("grad * x.clamp(0, max=n)", "(grad * x.clamp(0, at::Scalar(n)))"),
    }
    _carried(tmp_path, "clp", "SymInt n", formulas)


def test_sizes_and_none_to_int_and_optional_parameters_are_carried(tmp_path: Path) -> None:
    """torch_sparse's ptr2ind(rowptr, col.size(0)) and torch_scatter's segment_sum_coo(grad,
    index, None, src.size(0)): a SymInt given to an `int` parameter of a library op is guarded to
    an int, as torch.ops' Python binding does, and `int?`, `float?`, `bool?` parameters take a
    value or None (they kept the Python path)."""
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: trq\nops:\n"
                    "  - func: head(Tensor x, int k) -> Tensor\n"
                    "    dispatch: {CPU: head_cpu}\n"
                    "    fake: empty([k, x.size(1)])\n"
                    "    derivatives:\n"
                    "      x: pad(grad, x.size(0), x.size(1) * 1, None, True)\n"
                    "  - func: pad(Tensor g, int n, int? cols, float? value, bool? check) -> Tensor\n"
                    "    dispatch: {CPU: pad_cpu}\n"
                    "    fake: empty([n, g.size(1)])\n"
                    "    derivatives:\n"
                    "      g: head(grad, g.size(0))\n")
    out, diags = _render([str(path)])
    assert [d.message for d in diags.items] == []
    text = "\n".join(out.values())
    assert ("().call(grad, x_sizes_[c10::maybe_wrap_dim(0, static_cast<int64_t>(x_sizes_.size()), "
            "/*wrap_scalar=*/false)].guard_int(__FILE__, __LINE__), (x_sizes_[c10::maybe_wrap_dim("
            "1, static_cast<int64_t>(x_sizes_.size()), /*wrap_scalar=*/false)] * 1).guard_int("
            "__FILE__, __LINE__), ::std::nullopt, true)") in text, text
    assert ("().call(grad, g_sizes_[c10::maybe_wrap_dim(0, static_cast<int64_t>(g_sizes_.size()), "
            "/*wrap_scalar=*/false)].guard_int(__FILE__, __LINE__))") in text, text


def test_new_tensor_methods_are_carried(tmp_path: Path) -> None:
    """`grad.new_empty(src.shape)` (torch_scatter's segment_sum_csr), new_zeros, new_ones and
    new_full take the C++ path, as Tensor's methods of the same names, which take the dtype and
    device of the tensor (they kept the Python path)."""
    formulas = {
        "a": ("gather(grad, grad.new_empty(x.shape))",
              "opgen_gather_op().call(grad, grad.new_empty_symint(x_sizes_))"),
        "b": ("grad.new_zeros(x.shape) + grad.new_ones(sizes) * grad",
              "(grad.new_zeros_symint(x_sizes_) + (grad.new_ones(at::IntArrayRef(sizes)) * grad))"),
        "c": ("grad * grad.new_full(x.shape, x.size(0))",
              "(grad * grad.new_full_symint(x_sizes_, at::Scalar(x_sizes_[c10::maybe_wrap_dim(0, "
              "static_cast<int64_t>(x_sizes_.size()), /*wrap_scalar=*/false)])))"),
        "d": ("grad * grad.new_full(x.shape, fill_value=0.5)",
              "(grad * grad.new_full_symint(x_sizes_, 0.5))"),
    }
    _carried(tmp_path, "nwt", "int[] sizes", formulas,
             others="  - func: gather(Tensor g, Tensor out) -> Tensor\n"
                    "    dispatch: {CPU: gather_cpu}\n"
                    "    fake: like(out)\n"
                    "    derivatives:\n"
                    "      g: grad\n"
                    "      out: non_differentiable\n")


def test_dtype_cast_methods_are_carried(tmp_path: Path) -> None:
    """TensorRT-LLM's moe_unpermute gathers rows by an int32 index, `idx.long()`: Tensor's dtype
    casts (`.long()`, `.float()`, `.double()`, ...) take the C++ path as `.to(<ScalarType>)`
    (they kept the Python path, with a note)."""
    formulas = {
        "a": ("grad * idx.long().to(grad.dtype)",
              "(grad * idx.to(at::ScalarType::Long).to(grad.scalar_type()))"),
        "b": ("grad.index_select(0, idx.long()).float().double()",
              "grad.index_select(0, idx.to(at::ScalarType::Long)).to(at::ScalarType::Float)"
              ".to(at::ScalarType::Double)"),
    }
    _carried(tmp_path, "cst", "Tensor idx", formulas, idx=True)


def test_lists_of_sizes_are_carried(tmp_path: Path) -> None:
    """torch_scatter's `index.view([-1 if i == d else 1 for i in range(src.dim())])`,
    `[s + 1 if i == d else s for i, s in enumerate(src.shape)]` and `[n + 1] +
    list(src.shape[1:])`: comprehensions over range() and enumerate() giving ints or SymInts,
    list literals of them, their `+`, slices and `list()`, and `len()` of a list take the C++
    path (they kept the Python path), as std::vectors of int64_t, or of c10::SymInt where a
    size is read, so that no size is specialized."""
    formulas = {
        "a": ("grad.view([-1 if i == 0 else 1 for i in range(x.dim())])",
              "grad.view(at::IntArrayRef([&] {\n  std::vector<int64_t> out;\n"
              "  for (int64_t i = 0; i < static_cast<int64_t>(x_sizes_.size()); ++i) {\n"
              "    out.push_back(((i == 0) ? (-1) : 1));\n  }\n  return out;\n}()))"),
        "b": ("grad.reshape([s for i, s in enumerate(x.shape) if i != 1 - 1])",
              "grad.reshape_symint([&] {\n  const auto& seq = x_sizes_;\n"
              "  std::vector<c10::SymInt> out;\n  out.reserve(seq.size());\n"
              "  for (size_t i = 0; i < seq.size(); ++i) {\n"
              "    const auto& i_ = static_cast<int64_t>(i);\n    const auto& s = seq[i];\n"
              "    if ((i_ != (1 - 1))) {\n      out.push_back(s);\n    }\n  }\n"
              "  return out;\n}())"),
        "c": ("grad.reshape([x.size(0)] + list(x.shape[1:]))",
              "grad.reshape_symint(opgen_concat(std::vector<c10::SymInt>{x_sizes_["
              "c10::maybe_wrap_dim(0, static_cast<int64_t>(x_sizes_.size()), "
              "/*wrap_scalar=*/false)]}, opgen_slice<c10::SymInt>(x_sizes_, 1, ::std::nullopt)))"),
        "d": ("grad.view([1, 1] + sizes[:-2] + [1 for t in range(2, len(sizes))])",
              "grad.view(at::IntArrayRef(opgen_concat(opgen_concat(std::vector<int64_t>{1, 1}, "
              "opgen_slice<int64_t>(sizes, ::std::nullopt, (-2))), [&] {\n"
              "  std::vector<int64_t> out;\n"
              "  for (int64_t t = 2; t < static_cast<int64_t>(sizes.size()); ++t) {\n"
              "    out.push_back(1);\n  }\n  return out;\n}())))"),
    }
    _carried(tmp_path, "lst", "int[] sizes", formulas)


def test_gather_scatter_narrow_diff_flatten_are_carried(tmp_path: Path) -> None:
    """torch.gather and the tensor methods gather, scatter (of a tensor or a number),
    scatter_add, narrow (SymInt start and length), diff and flatten, which torch_scatter's and
    torch_sparse's formulas use, take the C++ path (they kept the Python path)."""
    formulas = {
        "a": ("torch.gather(grad, 0, idx) + grad.gather(-1, idx)",
              "(at::gather(grad, 0, idx) + grad.gather((-1), idx))"),
        "b": ("grad.new_zeros([grad.size(0) + 1]).scatter(0, idx, grad).narrow(0, 0, "
              "grad.size(0))",
              "grad.new_zeros_symint(std::vector<c10::SymInt>{(grad.sym_size(0) + 1)})"
              ".scatter(0, idx, grad).narrow_symint(0, c10::SymInt(0), grad.sym_size(0))"),
        "c": ("torch.zeros_like(x).scatter_add(0, idx, grad).scatter(0, idx, 2.0) * x",
              "(at::zeros_like(x).scatter_add(0, idx, grad).scatter(0, idx, at::Scalar(2.0)) "
              "* x)"),
        "d": ("grad * idx.diff().flatten() + grad * idx.diff(1, 0).flatten(0, -1)",
              "((grad * idx.diff().flatten()) + (grad * idx.diff(1, 0).flatten(0, (-1))))"),
    }
    _carried(tmp_path, "gsc", "Tensor idx", formulas, idx=True)


# torch_scatter's and torch_sparse's constructs, in two namespaces: `cts` on the C++ path and
# `pts` (`autograd: python`) on the Python one, so that one build compares them.
SCATTER_OPS = """\
namespace: {ns}
{setting}ops:
  - func: scatter_sum(Tensor src, Tensor index, int dim, int dim_size) -> Tensor
    dispatch: {{CPU: scatter_sum_cpu}}
    fake: d = dim % src.dim(); empty(src.shape[:d] + [dim_size] + src.shape[d + 1:])
    derivatives:
      src: >-
        d = dim % src.dim();
        idx = index.view([-1 if i == d else 1 for i in range(src.dim())]).expand_as(src) if index.dim() == 1 else index;
        torch.gather(grad, d, idx)
      index: non_differentiable
  - func: take(Tensor src, Tensor pos) -> Tensor
    dispatch: {{CPU: take_cpu}}
    fake: empty(pos.shape, dtype=src.dtype)
    derivatives:
      src: >-
        sh = [s + 1 if i == 0 else s for i, s in enumerate(src.shape)];
        grad.new_zeros(sh).scatter(0, pos, grad).narrow(0, 0, src.size(0))
      pos: non_differentiable
  - func: take_add(Tensor src, Tensor pos) -> Tensor
    dispatch: {{CPU: take_add_cpu}}
    fake: empty(pos.shape, dtype=src.dtype)
    derivatives:
      src: >-
        n = src.size(0);
        grad.new_zeros([n + 1] + list(src.shape[1:])).scatter_add(0, pos, grad).narrow(0, 0, n)
      pos: non_differentiable
  - func: seg_scale(Tensor x, Tensor indptr) -> Tensor
    dispatch: {{CPU: seg_scale_cpu}}
    fake: like(x)
    derivatives:
      x: grad / indptr.diff().clamp(min=1) * indptr.diff().flatten().clamp(max=x.size(0) - 1)
      indptr: non_differentiable
  - func: head(Tensor x, int k) -> Tensor
    dispatch: {{CPU: head_cpu}}
    fake: empty([k, x.size(1)])
    derivatives:
      x: pad(grad, x.size(0), x.size(1))
  - func: pad(Tensor g, int n, int? cols) -> Tensor
    dispatch: {{CPU: pad_cpu}}
    fake: empty([n, cols]) if cols is not None else empty([n, g.size(1)])
    derivatives:
      g: grad[:g.size(0), :g.size(1)]
  - func: twice(Tensor x) -> Tensor
    dispatch: {{CPU: twice_cpu}}
    fake: like(x)
    derivatives:
      x: >-
        torch.where(grad.new_ones(x.shape) > 0, grad.new_zeros(x.shape) + grad, grad.new_empty(x.shape))
        + grad.new_full(x.shape, 1.0) * grad
"""
SCATTER_KERNELS = """\
#include <ATen/ATen.h>
#include <{ns}/{ns}.h>

namespace {ns} {{

at::Tensor scatter_sum_cpu(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                           int64_t dim_size) {{
  const auto d = c10::maybe_wrap_dim(dim, src.dim());
  auto sizes = src.sizes().vec();
  sizes[d] = dim_size;
  at::Tensor idx = index;
  if (index.dim() == 1) {{
    std::vector<int64_t> shape(src.dim(), 1);
    shape[d] = -1;
    idx = index.view(shape).expand_as(src);
  }}
  return at::zeros(sizes, src.options()).scatter_add(d, idx, src);
}}
// src's rows at pos, a row of zeros where pos is src.size(0)
at::Tensor take_cpu(const at::Tensor& src, const at::Tensor& pos) {{
  return at::cat({{src, at::zeros_like(src.narrow(0, 0, 1))}}, 0).gather(0, pos);
}}
at::Tensor take_add_cpu(const at::Tensor& src, const at::Tensor& pos) {{
  return take_cpu(src, pos);
}}
at::Tensor seg_scale_cpu(const at::Tensor& x, const at::Tensor& indptr) {{
  return x / indptr.diff().clamp_min(1) * indptr.diff().flatten().clamp_max(x.size(0) - 1);
}}
at::Tensor head_cpu(const at::Tensor& x, int64_t k) {{ return x.narrow(0, 0, k).clone(); }}
at::Tensor pad_cpu(const at::Tensor& g, int64_t n, std::optional<int64_t> cols) {{
  auto out = at::zeros({{n, cols.value_or(g.size(1))}}, g.options());
  out.narrow(0, 0, g.size(0)).narrow(1, 0, g.size(1)).copy_(g);
  return out;
}}
at::Tensor twice_cpu(const at::Tensor& x) {{ return x * 2; }}

}}  // namespace {ns}
"""
SCATTER_CHECK = """\
import torch
import runtime  # noqa: F401  (loads the built library)
from torch._dynamo.testing import CompileCounterWithBackend
from torch.autograd import gradcheck, gradgradcheck

L = lambda *v: torch.tensor(v, dtype=torch.int64)
cases = {  # op -> (input shape, the call at it), two points each
    "scatter_sum": [((6, 3), lambda ns, t: ns.scatter_sum(t, L(0, 2, 1, 2, 0, 3), 0, 4)),
                    ((2, 5), lambda ns, t: ns.scatter_sum(t, L(1, 0, 2, 2, 0), -1, 3)),
                    ((3, 4), lambda ns, t: ns.scatter_sum(t, L([0, 1, 1, 0], [2, 2, 0, 1],
                                                              [1, 0, 0, 2]), 1, 3))],
    # distinct positions in each column but the row of zeros (4, 3)
    "take": [((4, 3), lambda ns, t: ns.take(t, L([0, 4, 1], [3, 2, 4]))),
             ((3, 2), lambda ns, t: ns.take(t, L([2, 3], [3, 0], [0, 1])))],
    "take_add": [((4, 3), lambda ns, t: ns.take_add(t, L([0, 4, 1], [0, 2, 4]))),
                 ((3, 2), lambda ns, t: ns.take_add(t, L([2, 2], [3, 0], [1, 1])))],
    "seg_scale": [((4,), lambda ns, t: ns.seg_scale(t, L(0, 2, 2, 5, 9))),
                  ((3,), lambda ns, t: ns.seg_scale(t, L(0, 1, 4, 4)))],
    "head": [((5, 3), lambda ns, t: ns.head(t, 2)), ((4, 2), lambda ns, t: ns.head(t, 3))],
    "pad": [((2, 3), lambda ns, t: ns.pad(t, 4, 5)), ((3, 2), lambda ns, t: ns.pad(t, 5, None))],
    "twice": [((3, 2), lambda ns, t: ns.twice(t)), ((4,), lambda ns, t: ns.twice(t))],
}
cpp, python = torch.ops.cts, torch.ops.pts
for name, points in cases.items():
    node = "".join(p.capitalize() for p in name.split("_")) + "Backward"
    counters = {}
    for k, (shape, call) in enumerate(points):
        x = torch.randn(shape, dtype=torch.double, generator=torch.Generator().manual_seed(k),
                        requires_grad=True)
        assert call(cpp, x).grad_fn.name() == node, (name, call(cpp, x).grad_fn.name())
        assert type(call(python, x).grad_fn).__name__ != "CppFunction", name
        assert gradcheck(lambda t: call(cpp, t), (x,)), name
        assert gradgradcheck(lambda t: call(cpp, t), (x,)), name
        out = call(cpp, x)
        g = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(9))
        (on_cpp,) = torch.autograd.grad(out, x, g)
        (on_python,) = torch.autograd.grad(call(python, x), x, g)
        assert torch.equal(on_cpp, on_python), (name, on_cpp, on_python)
        # Under dynamic shapes the backward is traced with symbolic sizes: the same gradient,
        # and as many graphs as the Python path compiles (an int parameter given a size
        # specializes it on both).
        for path, ns in (("cpp", cpp), ("python", python)):
            torch._dynamo.reset()   # each point and path compiles apart
            counter = counters.setdefault(path, CompileCounterWithBackend("aot_eager"))
            compiled = torch.compile(lambda t: call(ns, t), backend=counter, dynamic=True,
                                     fullgraph=True)
            (on_compiled,) = torch.autograd.grad(compiled(x), x, g)
            assert torch.allclose(on_compiled, on_cpp), (name, path, on_compiled, on_cpp)
    assert counters["cpp"].frame_count == counters["python"].frame_count, name
print("ok")
"""


@pytest.mark.slow
def test_scatter_constructs_take_the_cpp_path(tmp_path: Path) -> None:
    """torch_scatter's and torch_sparse's formulas: comprehensions over range() and enumerate()
    giving sizes, lists of sizes joined and sliced, new_zeros/new_empty/new_ones/new_full,
    gather, scatter, scatter_add, narrow, diff, flatten, clamp(min=...) and clamp(max=<size>),
    and sizes given to `int` and `int?` parameters of library ops take the C++ path: gradients
    pass gradcheck and gradgradcheck, equal those of the Python path exactly, and are the same
    under torch.compile with dynamic shapes."""
    _check_beside_python(tmp_path, SCATTER_OPS, SCATTER_KERNELS, SCATTER_CHECK, "cts", "pts",
                         ("scatter_sum", "take", "take_add", "seg_scale", "head", "pad", "twice"))


def test_a_call_giving_several_gradients_is_taken_apart_in_cpp(tmp_path: Path) -> None:
    """`a, b: mix_backward(grad, a, b)`, a library op returning a Tensor per input, is one call
    whose elements are the gradients; called any other way, such an op keeps the Python path."""
    path = tmp_path / "ops.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: tup
        ops:
          - func: mix(Tensor a, Tensor b) -> Tensor
            dispatch: {CPU: mix_cpu}
            fake: broadcast(a, b)
            derivatives:
              a, b: mix_backward(grad, a, b)
          - func: mix_backward(Tensor grad, Tensor a, Tensor b) -> (Tensor, Tensor)
            dispatch: {CPU: mix_backward_cpu}
            fake: (like(a), like(b))
          - func: indexed(Tensor a, Tensor b) -> Tensor
            dispatch: {CPU: indexed_cpu}
            fake: broadcast(a, b)
            derivatives:
              a: mix_backward(grad, a, b)[0]
              b: mix_backward(grad, a, b)[1]
        """))
    lib = load_library([str(path)])
    ops = {op.name.name: op for op in lib.ops}
    assert cpp_autograd.reason(lib, ops["mix"]) is None
    assert cpp_autograd.reason(lib, ops["indexed"]) == (
        "its formulas call tup::mix_backward, which does not return one Tensor")
    out, _ = _render([str(path)])
    (source,) = out.values()
    assert "auto input_grads = opgen_mix_backward_op().call(grad, a, b);" in source
    assert "grad_inputs[1] = std::get<1>(input_grads);" in source


def test_a_call_giving_an_optional_gradient_is_taken_apart_in_cpp(tmp_path: Path) -> None:
    """causal-conv1d's backward returns `Tensor? dbias`, None without a bias: taken apart in
    C++ too, its None an undefined Tensor (no gradient)."""
    path = tmp_path / "ops.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: tupopt
        ops:
          - func: conv(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor
            dispatch: {CPU: conv_cpu}
            fake: like(x)
            derivatives:
              x, weight, bias: conv_bwd(x, weight, bias, grad)
          - func: conv_bwd(Tensor x, Tensor weight, Tensor? bias, Tensor dout) -> (Tensor dx, Tensor dweight, Tensor? dbias)
            dispatch: {CPU: conv_bwd_cpu}
            fake: (like(x), like(weight), like(bias) if bias is not None else None)
        """))
    lib = load_library([str(path)])
    ops = {op.name.name: op for op in lib.ops}
    assert cpp_autograd.reason(lib, ops["conv"]) is None
    out, _ = _render([str(path)])
    (source,) = out.values()
    assert "auto input_grads = opgen_conv_bwd_op().call(x, weight, opgen_optional(bias), grad);" \
        in source
    assert "grad_inputs[1] = std::get<1>(input_grads);" in source
    assert "grad_inputs[2] = std::get<2>(input_grads).value_or(at::Tensor());" in source


def test_an_optional_tensor_input_reaches_a_library_op_as_none(tmp_path: Path) -> None:
    """A `Tensor?` input left None is saved and unpacked as an undefined Tensor: given on to a
    `Tensor?` parameter, it is None again (an optional holding an undefined Tensor has a value,
    and a kernel testing `bias.has_value()` read it); a required Tensor passes as it is."""
    path = tmp_path / "ops.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: optin
        ops:
          - func: conv(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor
            dispatch: {CPU: conv_cpu}
            fake: like(x)
            derivatives:
              x: conv_bwd_x(grad, weight, bias)
              weight: conv_bwd_x(grad, x, weight)
              bias: grad.sum()
          - func: conv_bwd_x(Tensor dout, Tensor weight, Tensor? bias) -> Tensor
            dispatch: {CPU: conv_bwd_x_cpu}
            fake: like(dout)
        """))
    lib = load_library([str(path)])
    assert cpp_autograd.reason(lib, next(op for op in lib.ops if op.name.name == "conv")) is None
    out, _ = _render([str(path)])
    (source,) = out.values()
    assert "opgen_conv_bwd_x_op().call(grad, weight, opgen_optional(bias));" in source
    assert "opgen_conv_bwd_x_op().call(grad, x, weight);" in source
    assert "std::optional<at::Tensor> opgen_optional(const at::Tensor& t) {" in source


def test_an_optional_number_passes_to_a_parameter_of_its_type(tmp_path: Path) -> None:
    """`scale=scale` of flash-attention's `float? scale` reaches the backward op in C++; given
    to a parameter of another type (std::optional<double> does not convert), the op keeps the
    Python path, and read any other way too."""
    path = tmp_path / "ops.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: opt
        ops:
          - func: back(Tensor grad, Tensor x, float? scale=None, int? n=None) -> Tensor
            dispatch: {CPU: back_cpu}
            fake: broadcast(grad, x)
          - func: same(Tensor x, float? scale=None) -> Tensor
            dispatch: {CPU: f_cpu}
            fake: like(x)
            derivatives:
              x: back(grad, x, scale=scale)
          - func: other(Tensor x, int? scale=None) -> Tensor
            dispatch: {CPU: f_cpu}
            fake: like(x)
            derivatives:
              x: back(grad, x, scale)
          - func: read(Tensor x, float? scale=None) -> Tensor
            dispatch: {CPU: f_cpu}
            fake: like(x)
            derivatives:
              x: grad if scale is None else grad * scale
        """))
    lib = load_library([str(path)])
    ops = {op.name.name: op for op in lib.ops}
    assert cpp_autograd.reason(lib, ops["same"]) is None
    assert cpp_autograd.reason(lib, ops["other"]) == (
        "argument 'scale' of opt::back is float?, and the formula gives it int?, which the C++ "
        "translation does not convert")
    assert cpp_autograd.reason(lib, ops["read"]) is not None
    out, _ = _render([str(path)])
    (source,) = out.values()
    assert "std::optional<double> scale_value_;" in source


def test_more_torch_operations_are_carried(tmp_path: Path) -> None:
    """softmax, log_softmax, logsumexp, cumsum, flip, roll, permute, movedim, masked_fill,
    tril/triu, chunk/split/unbind (lists of tensors), stack, select, unflatten, torch dtypes,
    float() of sizes, new_zeros(dtype=), zeros_like(dtype=), scatter(src=), clamp between tensors,
    enumerate(..., start) and range() over a size take the C++ path (each kept the Python path),
    each as the C++ call with Python's meaning."""
    formulas = {
        "a": ("torch.roll(grad.flip(0).cumsum(0).flip(0), -k, 0)",
              "at::roll(grad.flip(at::IntArrayRef({0})).cumsum(0).flip(at::IntArrayRef({0})), "
              "at::IntArrayRef({(-k)}), at::IntArrayRef({0}))"),
        "b": ("grad.unsqueeze(-1) * torch.softmax(x, -1) + x.log_softmax(dim=-1) * "
              "torch.logsumexp(x, [-1], keepdim=True)",
              "((grad.unsqueeze((-1)) * at::softmax(x, (-1))) + (x.log_softmax((-1)) * "
              "at::logsumexp(x, at::IntArrayRef(std::vector<int64_t>{(-1)}), true)))"),
        "c": ("torch.permute(grad, [1, 0]).movedim(0, -1).masked_fill(x > 0, 0).tril(-1) + "
              "torch.triu(grad, diagonal=1)",
              "(at::permute(grad, at::IntArrayRef(std::vector<int64_t>{1, 0})).movedim(0, (-1))"
              ".masked_fill(at::gt(x, 0), at::Scalar(0)).tril((-1)) + at::triu(grad, 1))"),
        "d": ("h = x.chunk(2); p = torch.split(x, [1, x.size(0) - 1]); "
              "torch.cat([grad * h[1], grad * h[0]]) + torch.stack(grad.unbind(0)) * "
              "p[0].select(0, 0).sum() + grad.split(1)[0].sum()",
              None),
        "e": ("(torch.zeros_like(x, dtype=torch.float64) + grad.to(torch.float64)).to(x.dtype) / "
              "float(x.numel()) + grad.new_zeros(x.shape, dtype=x.dtype)",
              "(((at::zeros_like(x, at::ScalarType::Double) + grad.to(at::ScalarType::Double))"
              ".to(x.scalar_type()) / at::Scalar(c10::SymFloat(x.sym_numel()))) + "
              "grad.new_zeros_symint(x.sym_sizes(), at::TensorOptions().dtype(x.scalar_type())))"),
        "f": ("torch.zeros_like(x).scatter(0, idx, src=grad.unflatten(0, [1, grad.size(0)])"
              ".squeeze(0))",
              "at::zeros_like(x).scatter(0, idx, grad.unflatten_symint(0, "
              "std::vector<c10::SymInt>{1, grad.sym_size(0)}).squeeze(0))"),
        "h": ("torch.clamp(grad, x, x + 1) + grad.clamp(max=x) + torch.clamp(grad, None, x)",
              "((at::clamp(grad, x, (x + at::Scalar(1))) + "
              "grad.clamp(::std::optional<at::Tensor>(), x)) + "
              "at::clamp(grad, ::std::optional<at::Tensor>(), x))"),
        "g": ("torch.stack([grad.select(0, i) * (i + 1) for i in range(x.size(0))]) + "
              "torch.stack([g * i for i, g in enumerate(grad.unbind(), 1)])",
              None),
    }
    lib = _carried(tmp_path, "more", "Tensor idx, int k", formulas, idx=True)
    body = "\n".join(cpp_autograd.plan(lib, lib.ops[3]).body)
    assert "x.chunk(2)" in body and "x.split_symint(std::vector<c10::SymInt>{1, " in body
    assert "grad.unbind(0)" in body and "grad.split(1, 0).at(0)" in body
    body = "\n".join(cpp_autograd.plan(lib, lib.ops[7]).body)
    # the range's bound is guarded once; enumerate counts from 1
    assert body.count("guard_int(__FILE__, __LINE__)") == 1, body
    assert "static_cast<int64_t>(i_) + 1;" in body, body


def test_einsum_pad_unfold_and_repeat_interleave_are_carried(tmp_path: Path) -> None:
    """torch.einsum (operands as arguments or as a list), torch.nn.functional.pad (sizes as a
    list or a tuple, with a mode and a value), unfold and repeat_interleave (repeats an int, a
    size or a Tensor; as a method or a torch function), and permute, flip, reshape, view, expand
    and repeat given separate ints take the C++ path (each kept the Python path), each as the
    C++ call with Python's meaning; what they do not take keeps Python's."""
    formulas = {
        "a": ("torch.einsum('ij,jk->ik', grad, x.t()) + torch.einsum('ij->ji', [grad]).t()",
              '(at::einsum(std::string_view("ij,jk->ik"), std::vector<at::Tensor>{grad, x.t()}) '
              '+ at::einsum(std::string_view("ij->ji"), std::vector<at::Tensor>{grad}).t())'),
        "b": ("torch.nn.functional.pad(grad, (1, k))[:, 1:-k] + "
              "torch.nn.functional.pad(grad, [0, x.size(1)], 'constant', value=2)[:, :-x.size(1)]",
              None),
        # sizes and dims as separate ints, as Python takes them
        "d": ("grad.permute(1, 0).flip(0, 1).reshape(grad.size(1), -1).view(-1).view("
              "grad.size(1), grad.size(0)).repeat(1, 1)",
              "grad.permute(at::IntArrayRef(std::vector<int64_t>{1, 0})).flip(at::IntArrayRef("
              "std::vector<int64_t>{0, 1})).reshape_symint(std::vector<c10::SymInt>{"
              "grad.sym_size(1), (-1)}).view(at::IntArrayRef(std::vector<int64_t>{(-1)}))"
              ".view_symint(std::vector<c10::SymInt>{grad.sym_size(1), grad.sym_size(0)})"
              ".repeat(at::IntArrayRef(std::vector<int64_t>{1, 1}))"),
        "c": ("grad.unfold(0, 1, 1).squeeze(-1) + grad.repeat_interleave(2, 0)[::2] + "
              "grad.repeat_interleave(idx, dim=0) + torch.repeat_interleave(grad, 1, 1)",
              "(((grad.unfold(0, 1, 1).squeeze((-1)) + grad.repeat_interleave_symint("
              "c10::SymInt(2), 0).index({at::indexing::Slice(std::nullopt, std::nullopt, 2)})) + "
              "grad.repeat_interleave_symint(idx, 0)) + "
              "at::repeat_interleave_symint(grad, c10::SymInt(1), 1))"),
    }
    lib = _carried(tmp_path, "epur", "Tensor idx, int k", formulas, idx=True)
    body = "\n".join(cpp_autograd.plan(lib, lib.ops[1]).body)
    assert 'at::pad_symint(grad, c10::fromIntArrayRefSlow(std::vector<int64_t>{1, k}), ' \
        '"constant", std::nullopt)' in body, body
    assert 'std::string_view("constant"), std::optional<double>(2))' in body, body
    refused = {
        "torch.einsum(grad, x)": "torch.einsum with a Tensor equation",
        "torch.nn.functional.pad(grad, [1, 0], value=x)":
            "torch.nn.functional.pad with a Tensor value",
        "torch.nn.functional.pad(grad, x)": "torch.nn.functional.pad of a Tensor by a Tensor",
        "grad.view(1, x)": ".view with arguments of kinds int, Tensor",
    }
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: epurno\nops:\n" + "".join(
        f"  - func: r{i}(Tensor x) -> Tensor\n"
        f"    dispatch: {{CPU: r{i}_cpu}}\n"
        "    fake: like(x)\n"
        f"    derivatives: {{x: \"{formula}\"}}\n" for i, formula in enumerate(refused)))
    lib = load_library([str(path)])
    assert [cpp_autograd.reason(lib, op) for op in lib.ops] == [
        f"its formulas use {why}, which the C++ translation does not carry"
        for why in refused.values()]


# Ops whose formulas use the operations test_more_torch_operations_are_carried lists, with real
# derivatives, in two namespaces: `cmo` on the C++ path and `pmo` (`autograd: python`) on the
# Python one, so that one build compares them.
MORE_OPS = """\
namespace: {ns}
{setting}ops:
  - func: rcsum(Tensor x, int k) -> Tensor
    dispatch: {{CPU: rcsum_cpu}}
    fake: like(x)
    derivatives:
      x: torch.roll(grad, -k, 0).flip(0).cumsum(0).flip(0)
  - func: lse(Tensor x) -> Tensor
    dispatch: {{CPU: lse_cpu}}
    fake: reduce(x, -1)
    derivatives:
      x: grad.unsqueeze(-1) * torch.softmax(x, -1)
  - func: lsm(Tensor x) -> Tensor
    dispatch: {{CPU: lsm_cpu}}
    fake: like(x)
    derivatives:
      x: grad - x.log_softmax(dim=-1).exp() * grad.sum(-1, keepdim=True)
  - func: turn(Tensor x, Tensor mask) -> Tensor
    dispatch: {{CPU: turn_cpu}}
    fake: empty([x.size(2), x.size(0), x.size(1)])
    derivatives:
      x: torch.permute(grad.movedim(0, -1), [1, 0, 2]).transpose(0, 1).masked_fill(mask, 0)
      mask: non_differentiable
  - func: tri(Tensor x) -> Tensor
    dispatch: {{CPU: tri_cpu}}
    fake: like(x)
    derivatives:
      x: grad.tril(-1) + torch.triu(grad, diagonal=1) * 2
  - func: halves(Tensor x) -> Tensor
    dispatch: {{CPU: halves_cpu}}
    fake: h = x.size(0) // 2; empty([h] + x.shape[1:])
    derivatives:
      x: h = x.chunk(2); torch.cat([grad * h[1], grad * h[0]])
  - func: head_rest(Tensor x) -> Tensor
    dispatch: {{CPU: head_rest_cpu}}
    fake: empty(x.shape[1:])
    derivatives:
      x: >-
        p = torch.split(x, [1, x.size(0) - 1]);
        torch.cat([(grad * p[1].sum(0)).unsqueeze(0), (grad * p[0].select(0, 0)).expand_as(p[1])])
  - func: rows(Tensor x) -> Tensor
    dispatch: {{CPU: rows_cpu}}
    fake: reduce(x, 0)
    derivatives:
      x: r = x.unbind(); torch.stack([grad * r[1], grad * r[0]])
  - func: mean64(Tensor x) -> Tensor
    dispatch: {{CPU: mean64_cpu}}
    fake: empty([], dtype=x.dtype)
    derivatives:
      x: >-
        (torch.zeros_like(x, dtype=torch.float64) + grad.to(torch.float64)).to(x.dtype)
        / float(x.numel()) + grad.new_zeros(x.shape, dtype=x.dtype)
  - func: pick(Tensor x, Tensor idx) -> Tensor
    dispatch: {{CPU: pick_cpu}}
    fake: like(idx, dtype=x.dtype)
    derivatives:
      x: torch.zeros_like(x).scatter(0, idx, src=grad.unflatten(0, [1, grad.size(0)]).squeeze(0))
      idx: non_differentiable
  - func: floor_at(Tensor x, Tensor lo) -> Tensor
    dispatch: {{CPU: floor_at_cpu}}
    fake: like(x)
    derivatives:
      x: grad * (x.clamp(min=lo) == x)
      lo: grad * (torch.clamp(x, lo, None) != x)
  - func: ramp(Tensor x) -> Tensor
    dispatch: {{CPU: ramp_cpu}}
    fake: like(x)
    derivatives:
      x: >-
        torch.stack([grad.select(0, i) * (i + 1) for i in range(x.size(0))]) * 0.5
        + torch.stack([g * i for i, g in enumerate(grad.unbind(), 1)]) * 0.5
  - func: bil(Tensor x, Tensor w) -> Tensor
    dispatch: {{CPU: bil_cpu}}
    fake: empty([x.size(0), w.size(1)])
    derivatives:
      x: torch.einsum("ik,jk->ij", grad, w) + torch.einsum('ik->i', [grad]).unsqueeze(1).expand_as(x)
      w: non_differentiable
  - func: shifted(Tensor x) -> Tensor
    dispatch: {{CPU: shifted_cpu}}
    fake: like(x)
    derivatives:
      x: >-
        torch.nn.functional.pad(grad[:, :-1], (1, 0)) * 0.5
        + torch.nn.functional.pad(grad[:, :-1], [1, 0], "constant", value=0.0) * 0.5
  - func: pairsum(Tensor x) -> Tensor
    dispatch: {{CPU: pairsum_cpu}}
    fake: empty([x.size(0) // 2])
    derivatives:
      x: (grad.repeat_interleave(x.size(0) // grad.size(0)) + torch.repeat_interleave(grad, 2, 0)) * 0.5
  - func: dup(Tensor x) -> Tensor
    dispatch: {{CPU: dup_cpu}}
    fake: empty([x.size(0) * 2])
    derivatives:
      x: grad.unfold(0, 2, 2).sum(-1)
  - func: tp(Tensor x) -> Tensor
    dispatch: {{CPU: tp_cpu}}
    fake: empty([x.size(1) * x.size(0)])
    derivatives:
      x: grad.view(x.size(1), x.size(0)).permute(1, 0).flip(0, 1).reshape(x.size(0), -1) * 2
"""
MORE_KERNELS = """\
#include <ATen/ATen.h>
#include <{ns}/{ns}.h>

namespace {ns} {{

at::Tensor rcsum_cpu(const at::Tensor& x, int64_t k) {{ return x.cumsum(0).roll(k, 0); }}
at::Tensor lse_cpu(const at::Tensor& x) {{ return x.logsumexp(-1); }}
at::Tensor lsm_cpu(const at::Tensor& x) {{ return x.log_softmax(-1); }}
at::Tensor turn_cpu(const at::Tensor& x, const at::Tensor& mask) {{
  return x.masked_fill(mask, 0).permute({{2, 0, 1}}).contiguous();
}}
at::Tensor tri_cpu(const at::Tensor& x) {{ return x.tril(-1) + x.triu(1) * 2; }}
at::Tensor halves_cpu(const at::Tensor& x) {{
  auto h = x.chunk(2);
  return h[0] * h[1];
}}
at::Tensor head_rest_cpu(const at::Tensor& x) {{ return x[0] * x.slice(0, 1).sum(0); }}
at::Tensor rows_cpu(const at::Tensor& x) {{ return x[0] * x[1]; }}
at::Tensor mean64_cpu(const at::Tensor& x) {{
  return x.to(at::kDouble).mean().to(x.scalar_type());
}}
at::Tensor pick_cpu(const at::Tensor& x, const at::Tensor& idx) {{ return x.gather(0, idx); }}
at::Tensor floor_at_cpu(const at::Tensor& x, const at::Tensor& lo) {{ return x.clamp_min(lo); }}
at::Tensor ramp_cpu(const at::Tensor& x) {{
  auto w = at::arange(1, x.size(0) + 1, x.options());
  return x * w.view({{-1, 1}});
}}
at::Tensor bil_cpu(const at::Tensor& x, const at::Tensor& w) {{
  return at::einsum("ij,jk->ik", {{x, w}}) + x.sum(1, true);
}}
at::Tensor shifted_cpu(const at::Tensor& x) {{ return at::constant_pad_nd(x.slice(1, 1), {{0, 1}}); }}
at::Tensor pairsum_cpu(const at::Tensor& x) {{ return x.unfold(0, 2, 2).sum(-1); }}
at::Tensor dup_cpu(const at::Tensor& x) {{ return x.repeat_interleave(2); }}
at::Tensor tp_cpu(const at::Tensor& x) {{ return x.flip({{0, 1}}).t().reshape({{-1}}) * 2; }}

}}  // namespace {ns}
"""
MORE_CHECK = """\
import torch
import runtime  # noqa: F401  (loads the built library)
from torch._dynamo.testing import CompileCounterWithBackend
from torch.autograd import gradcheck, gradgradcheck

gen = lambda k: torch.Generator().manual_seed(k)
m1, m2 = (torch.rand(s, generator=gen(7)) > 0.6 for s in ((2, 3, 4), (3, 2, 2)))
lo1, lo2 = (torch.randn(s, dtype=torch.double, generator=gen(8)) for s in ((4, 3), (5,)))
w1, w2 = (torch.randn(s, dtype=torch.double, generator=gen(10)) for s in ((4, 2), (3, 5)))
cases = {  # op -> (input shape, the call at it), two points each
    "rcsum": [((5, 2), lambda ns, t: ns.rcsum(t, 2)), ((4,), lambda ns, t: ns.rcsum(t, -1))],
    "lse": [((3, 4), lambda ns, t: ns.lse(t)), ((5,), lambda ns, t: ns.lse(t))],
    "lsm": [((3, 4), lambda ns, t: ns.lsm(t)), ((2, 2, 3), lambda ns, t: ns.lsm(t))],
    "turn": [((2, 3, 4), lambda ns, t: ns.turn(t, m1)),
             ((3, 2, 2), lambda ns, t: ns.turn(t, m2))],
    "tri": [((4, 4), lambda ns, t: ns.tri(t)), ((3, 5), lambda ns, t: ns.tri(t))],
    "halves": [((4, 3), lambda ns, t: ns.halves(t)), ((6,), lambda ns, t: ns.halves(t))],
    "head_rest": [((4, 3), lambda ns, t: ns.head_rest(t)), ((3,), lambda ns, t: ns.head_rest(t))],
    "rows": [((2, 3), lambda ns, t: ns.rows(t)), ((2, 2, 2), lambda ns, t: ns.rows(t))],
    "mean64": [((3, 4), lambda ns, t: ns.mean64(t)), ((5,), lambda ns, t: ns.mean64(t))],
    "pick": [((4, 3), lambda ns, t: ns.pick(t, torch.tensor([[3, 0, 2]]))),
             ((3, 2), lambda ns, t: ns.pick(t, torch.tensor([[1, 2]])))],
    "ramp": [((4, 3), lambda ns, t: ns.ramp(t)), ((3, 2), lambda ns, t: ns.ramp(t))],
    "floor_at": [((4, 3), lambda ns, t: ns.floor_at(t, lo1)),
                 ((5,), lambda ns, t: ns.floor_at(t, lo2))],
    "bil": [((3, 4), lambda ns, t: ns.bil(t, w1)), ((2, 3), lambda ns, t: ns.bil(t, w2))],
    "shifted": [((3, 4), lambda ns, t: ns.shifted(t)), ((2, 5), lambda ns, t: ns.shifted(t))],
    "pairsum": [((6,), lambda ns, t: ns.pairsum(t)), ((4,), lambda ns, t: ns.pairsum(t))],
    "dup": [((3,), lambda ns, t: ns.dup(t)), ((5,), lambda ns, t: ns.dup(t))],
    "tp": [((3, 4), lambda ns, t: ns.tp(t)), ((2, 5), lambda ns, t: ns.tp(t))],
}
cpp, python = torch.ops.cmo, torch.ops.pmo
for name, points in cases.items():
    node = "".join(p.capitalize() for p in name.split("_")) + "Backward"
    counters = {}
    for k, (shape, call) in enumerate(points):
        x = torch.randn(shape, dtype=torch.double, generator=gen(k), requires_grad=True)
        assert call(cpp, x).grad_fn.name() == node, (name, call(cpp, x).grad_fn.name())
        assert type(call(python, x).grad_fn).__name__ != "CppFunction", name
        assert gradcheck(lambda t: call(cpp, t), (x,)), name
        assert gradgradcheck(lambda t: call(cpp, t), (x,)), name
        out = call(cpp, x)
        g = torch.randn(out.shape, dtype=out.dtype, generator=gen(9))
        (on_cpp,) = torch.autograd.grad(out, x, g)
        (on_python,) = torch.autograd.grad(call(python, x), x, g)
        assert torch.allclose(on_cpp, on_python, rtol=0, atol=1e-12), (name, on_cpp, on_python)
        for path, ns in (("cpp", cpp), ("python", python)):
            torch._dynamo.reset()   # each point and path compiles apart
            counter = counters.setdefault(path, CompileCounterWithBackend("aot_eager"))
            compiled = torch.compile(lambda t: call(ns, t), backend=counter, dynamic=True,
                                     fullgraph=True)
            (on_compiled,) = torch.autograd.grad(compiled(x), x, g)
            assert torch.allclose(on_compiled, on_cpp), (name, path, on_compiled, on_cpp)
    assert counters["cpp"].frame_count == counters["python"].frame_count, name
print("ok")
"""


@pytest.mark.slow
def test_more_torch_operations_differentiate_as_python_does(tmp_path: Path) -> None:
    """The operations of test_more_torch_operations_are_carried and
    test_einsum_pad_unfold_and_repeat_interleave_are_carried, in formulas with real
    derivatives, take the C++ path: gradients pass gradcheck and gradgradcheck, equal those of
    the Python path, and are the same under torch.compile with dynamic shapes, with as many
    graphs."""
    _check_beside_python(tmp_path, MORE_OPS, MORE_KERNELS, MORE_CHECK, "cmo", "pmo",
                         ("rcsum", "lse", "lsm", "turn", "tri", "halves", "head_rest", "rows",
                          "mean64", "pick", "floor_at", "ramp", "bil", "shifted", "pairsum",
                          "dup", "tp"))


# An argument of each kind the tables of cpp_autograd name (`T|n`: both are tried).
_TABLE_ARGS = {"T": ["grad"], "T|n": ["grad", "2"], "n": ["2"], "i": ["0"],
               "si": ["0", "x.size(0)"], "d": ["0", "[0]"], "b": ["True"], "s": ["x.shape"],
               "TL": ["[grad, x]"], "dtype": ["torch.float64"], "f": ["1.0"]}


def _table_calls() -> list[str]:
    """A call of every torch function and tensor method of cpp_autograd's tables, in each form
    its specs allow, as a Tensor."""
    import itertools

    calls = []
    for table, prefix in ((cpp_autograd.TORCH_FUNCTIONS, "torch.{}("),
                          (cpp_autograd.TENSOR_METHODS, "grad.{}(")):
        for name, specs in sorted(table.items()):
            for spec in specs:
                choices = []
                for param in spec:
                    key, _, kind = param.rpartition(":")
                    choices.append([f"{key}={a}" if key else a for a in _TABLE_ARGS[kind]])
                for args in itertools.product(*choices):
                    # keywords follow the positional arguments they name, as C++ takes them
                    call = prefix.format(name) + ", ".join(args) + ")"
                    if name in ("chunk", "unbind"):
                        call += "[0]"
                    calls.append(call)
    return calls


@pytest.mark.slow
def test_every_table_entry_compiles(tmp_path: Path) -> None:
    """Each torch function and tensor method the C++ translation names, in each argument form
    its table allows, is taken by the C++ path and compiles warning-free against ATen: a table
    entry that C++ spells otherwise (an overload it lacks, an ambiguous call) fails here."""
    from codegen import toolchain as tc

    calls = _table_calls()
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: tbl\nops:\n" + "".join(
        f"  - func: t{i}(Tensor x) -> Tensor\n"
        f"    dispatch: {{CPU: t{i}_cpu}}\n"
        "    fake: like(x)\n"
        "    derivatives:\n"
        f"      x: \"{call}\"\n" for i, call in enumerate(calls)))
    lib = load_library([str(path)])
    refused = {call: cpp_autograd.reason(lib, op) for call, op in zip(calls, lib.ops)
               if cpp_autograd.reason(lib, op) is not None}
    assert not refused, refused
    out, diags = _render([str(path)])
    assert not diags.has_errors, diags.render()
    (source,) = out.values()
    src = tmp_path / "autograd.cpp"
    src.write_text(source)
    toolchain = tc.make_toolchain(tc.toolchain_key()).text
    cflags = shlex.split(tc.toolchain_var(toolchain, "cflags") or "")
    cxx = shlex.split(tc.toolchain_var(toolchain, "cxx") or "c++")
    proc = subprocess.run([*cxx, *cflags, "-Werror", "-fsyntax-only", str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-6000:]


BIAS_OPS = """\
namespace: {ns}
{setting}ops:
  - func: scaled_linear(Tensor x, Tensor w, Tensor? bias=None) -> Tensor
    dispatch: {{CPU: scaled_linear_cpu}}
    fake: empty([x.size(0), w.size(0)])
    derivatives:
      x: grad.mm(w)
      w: grad.t().mm(x)
      bias: unbroadcast(grad, bias).to(bias.dtype)
"""
BIAS_KERNELS = """\
#include <ATen/ATen.h>
#include <{ns}/{ns}.h>
namespace {ns} {{
at::Tensor scaled_linear_cpu(const at::Tensor& x, const at::Tensor& w,
                             const std::optional<at::Tensor>& bias) {{
  auto out = x.mm(w.t());
  return bias.has_value() ? (out + *bias).contiguous() : out;
}}
}}  // namespace {ns}
"""
BIAS_CHECK = """\
import torch
import runtime  # noqa: F401  (loads the built library)
from torch.autograd import gradcheck, gradgradcheck

cpp, python = torch.ops.ctb, torch.ops.ptb
for bias in (torch.randn(4, dtype=torch.double, requires_grad=True),
             torch.randn(1, dtype=torch.double, requires_grad=True), None):
    x = torch.randn(3, 5, dtype=torch.double, requires_grad=True)
    w = torch.randn(4, 5, dtype=torch.double, requires_grad=True)
    assert cpp.scaled_linear(x, w, bias).grad_fn.name() == "ScaledLinearBackward"
    inputs = (x, w) if bias is None else (x, w, bias)
    assert gradcheck(lambda *a: cpp.scaled_linear(*a), inputs)
    assert gradgradcheck(lambda *a: cpp.scaled_linear(*a), inputs)
    got = torch.autograd.grad(cpp.scaled_linear(*inputs).sum(), inputs)
    want = torch.autograd.grad(python.scaled_linear(*inputs).sum(), inputs)
    assert all(torch.equal(g, v) for g, v in zip(got, want))
print("ok")
"""


@pytest.mark.slow
def test_a_formula_reading_an_optional_tensors_metadata_takes_the_cpp_path(tmp_path: Path) -> None:
    """torchao's row-wise scaled linears give `Tensor? bias` the gradient
    `...sum(0).to(bias.dtype)`: its shape and dtype, read where it is given, are kept as
    optionals on the node (it was a note, and the op stayed on the Python path)."""
    _check_beside_python(tmp_path, BIAS_OPS, BIAS_KERNELS, BIAS_CHECK, "ctb", "ptb",
                         ("scaled_linear",))


VARARGS_OPS = """\
namespace: {ns}
{setting}ops:
  - func: group_sum(Tensor x, int g) -> Tensor
    dispatch: {{CPU: group_sum_cpu}}
    fake: empty([x.size(0), x.size(1) // g])
    derivatives:
      x: grad.unsqueeze(-1).expand(grad.size(0), grad.size(1), g).reshape(grad.size(0), -1).view(-1).view(x.size(0), x.size(1))
"""
VARARGS_KERNELS = """\
#include <ATen/ATen.h>
#include <{ns}/{ns}.h>
namespace {ns} {{
at::Tensor group_sum_cpu(const at::Tensor& x, int64_t g) {{
  return x.reshape({{x.size(0), -1, g}}).sum(-1);
}}
}}  // namespace {ns}
"""
VARARGS_CHECK = """\
import torch
import runtime  # noqa: F401  (loads the built library)
from torch.autograd import gradcheck, gradgradcheck

cpp, python = torch.ops.ctv, torch.ops.ptv
for shape, g in (((3, 8), 4), ((2, 6), 3)):
    x = torch.randn(shape, dtype=torch.double, requires_grad=True)
    assert cpp.group_sum(x, g).grad_fn.name() == "GroupSumBackward"
    assert gradcheck(lambda t: cpp.group_sum(t, g), (x,))
    assert gradgradcheck(lambda t: cpp.group_sum(t, g), (x,))
    got, = torch.autograd.grad(cpp.group_sum(x, g).sum(), (x,))
    want, = torch.autograd.grad(python.group_sum(x, g).sum(), (x,))
    assert torch.equal(got, want)
print("ok")
"""


@pytest.mark.slow
def test_shapes_given_size_by_size_take_the_cpp_path(tmp_path: Path) -> None:
    """torchao's tinygemm scale gradient reshapes with `grad.reshape(grad.size(0), -1, g)`:
    `reshape`, `view`, `expand`, `repeat` and `sum_to_size` given sizes one by one (ints and
    SymInts mixed) are carried (a note kept them on the Python path)."""
    _check_beside_python(tmp_path, VARARGS_OPS, VARARGS_KERNELS, VARARGS_CHECK, "ctv", "ptv",
                         ("group_sum",))


def test_the_python_path_note_points_at_the_formula_it_is_about(tmp_path: Path) -> None:
    """Of several formulas, the note is at the one C++ does not carry (it was at the first key of
    `derivatives:`, an `x: non_differentiable` in torchao's linears)."""
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: locnote\nops:\n"
                    "  - func: lin(Tensor x, Tensor w) -> Tensor\n"
                    "    dispatch: {CPU: lin_cpu}\n"
                    "    fake: empty([x.size(0), w.size(0)])\n"
                    "    derivatives:\n"
                    "      x: grad.mm(w)\n"
                    "      w: grad.t().mm(x) * torch.special.i0e(w)\n")
    _, diags = _render([str(path)])
    assert [(str(d.loc), d.message) for d in diags.items] == [
        (f"{path}:8:10", "locnote::lin: its Autograd kernel stays in Python: its formulas use "
                         "torch.special.i0e, which the C++ translation does not carry")]


NIBBLE_OPS = """\
namespace: {ns}
{setting}ops:
  - func: int4_rows(Tensor packed, Tensor scale) -> Tensor
    dispatch: {{CPU: int4_rows_cpu}}
    fake: empty([packed.size(0), packed.size(1) * 2], dtype=scale.dtype)
    derivatives:
      packed: non_differentiable
      scale: >-
        lo = torch.bitwise_right_shift(torch.bitwise_left_shift(packed, 4), 4);
        hi = torch.bitwise_right_shift(packed, 4) + 0 * torch.bitwise_and(torch.bitwise_or(torch.bitwise_xor(packed, 1), 2), 3);
        (grad * torch.stack([lo, hi], -1).reshape(packed.size(0), -1).to(grad.dtype)).sum(1)
"""
NIBBLE_KERNELS = """\
#include <ATen/ATen.h>
#include <{ns}/{ns}.h>
namespace {ns} {{
at::Tensor int4_rows_cpu(const at::Tensor& packed, const at::Tensor& scale) {{
  auto lo = at::bitwise_right_shift(at::bitwise_left_shift(packed, 4), 4);
  auto hi = at::bitwise_right_shift(packed, 4);
  return at::stack({{lo, hi}}, -1).reshape({{packed.size(0), -1}}).to(scale.scalar_type()) *
         scale.unsqueeze(1);
}}
}}  // namespace {ns}
"""
NIBBLE_CHECK = """\
import torch
import runtime  # noqa: F401  (loads the built library)
from torch.autograd import gradcheck

cpp, python = torch.ops.ctn, torch.ops.ptn
q = torch.randint(-128, 128, (3, 4), dtype=torch.int8)
s = torch.randn(3, dtype=torch.double, requires_grad=True)
assert cpp.int4_rows(q, s).grad_fn.name() == "Int4RowsBackward"
assert gradcheck(lambda t: cpp.int4_rows(q, t), (s,))
got, = torch.autograd.grad(cpp.int4_rows(q, s).sum(), (s,))
want, = torch.autograd.grad(python.int4_rows(q, s).sum(), (s,))
assert torch.equal(got, want)
print("ok")
"""


@pytest.mark.slow
def test_bitwise_functions_take_the_cpp_path(tmp_path: Path) -> None:
    """torchao's int4 linears unpack nibbles in their scale gradients
    (`torch.bitwise_right_shift(torch.bitwise_left_shift(w, 4), 4)`): the bitwise torch
    functions are carried (a note kept the op on the Python path)."""
    _check_beside_python(tmp_path, NIBBLE_OPS, NIBBLE_KERNELS, NIBBLE_CHECK, "ctn", "ptn",
                         ("int4_rows",))
