"""C++ Meta kernels from fake rules (codegen/dest/cpp_meta.py).

- Which rules become C++ and which stay Python, per op, on tests/golden/py/inputs/shapes.yaml
  (one op per rule feature).
- Golden file of the registration shard with its Meta block (refresh with `make golden`,
  EXPECTTEST_ACCEPT=1).
- Built for real (a scratch root with shapes.yaml and its Python kernels): a translated op has a
  Meta kernel and no Python fake; every sample passes opcheck (test_faketensor,
  test_aot_dispatch_dynamic) and torch.compile at three sizes with dynamic=True, one graph; and
  under FakeTensorMode with symbolic sizes the Meta kernel's output has the real output's shape
  and dtype, with sizes still symbolic.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from codegen import config
from codegen.dest import cpp_meta, cpp_register, py_fake
from codegen.diagnostics import Diagnostics
from codegen.load import load_library
from tests import expect, scratch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHAPES = "tests/golden/py/inputs/shapes.yaml"
EXPECTED = HERE / "golden" / "cpp" / "expected" / "meta"

# Ops of shapes.yaml whose rules stay Python, and why (cpp_meta's module docstring).
PYTHON_FAKES = {
    "shapetest::pad_last": "list comprehension",
    "shapetest::concat": "sum(), list comprehension, device=",
    "shapetest::split_rows": "an int return",
    "shapetest::filled": "factory op with device=",
    "shapetest::nonzero_values": "dynamic()",
    "shapetest::unique_counts": "dynamic()",
    "shapetest::every_other": "a slice with a step",
    "shapetest::chunks": "Tensor[] return",
    "shapetest::doubled": "Tensor[] return, list comprehension",
    "shapetest::positives": "Tensor[] return, dynamic()",
}


def _lib(monkeypatch):
    monkeypatch.chdir(ROOT)
    return load_library([SHAPES])


def test_which_rules_become_cpp(monkeypatch):
    lib = _lib(monkeypatch)
    with_rule = {str(op.name) for op in lib.ops if hasattr(op.fake, "outputs")}
    cpp = {str(op.name) for op in lib.ops if py_fake.uses_cpp_meta(op)}
    assert with_rule - cpp == set(PYTHON_FAKES)
    assert cpp & with_rule == with_rule - set(PYTHON_FAKES)
    assert len(cpp) >= 10


def test_schema_fakes_are_meta_kernels(monkeypatch):
    """An op returning nothing or only what it mutates needs no rule: its Meta kernel returns
    the arguments (an out= argument with a rule item is resized first)."""
    lib = _lib(monkeypatch)
    no_rule = {str(op.name) for op in lib.ops if op.fake is None and op.dispatch}
    assert no_rule == {"shapetest::normalize_", "shapetest::accumulate"}
    kernels = {str(op.name): cpp_meta.translate(op)[0] for op in lib.ops}
    assert kernels["shapetest::accumulate"].decl == \
        "void meta_accumulate(at::Tensor& /*acc*/, const at::Tensor& /*x*/)"
    assert kernels["shapetest::accumulate"].body == ()
    assert kernels["shapetest::normalize_"].body == ("return self;",)
    assert kernels["shapetest::normalize.out"].body == (
        "out.resize__symint(meta_like(self, std::nullopt).sym_sizes());", "return out;")


def test_golden_registration_shard(monkeypatch):
    lib = _lib(monkeypatch)
    diags = Diagnostics()
    out = cpp_register.generate(lib, diags, config.default_project(ROOT))
    assert not diags.has_errors, diags.render()
    (path, text), = out.items()
    expect.check_file(EXPECTED / Path(path).name, text)
    assert "TORCH_LIBRARY_IMPL(shapetest, Meta, m)" in text
    for name in PYTHON_FAKES:
        assert f'm.impl("{name.split("::")[1]}"' not in text


# --------------------------------------------------------------------------------------------------
# Built and run

CHECK = textwrap.dedent("""
    import json, torch
    from torch._library.simple_registry import singleton
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic, StatelessSymbolicContext
    import runtime
    from runtime import testing

    report = {"registered": {}, "checked": [], "symbolic": []}
    for case in testing.load_cases([%(shapes)r]):
        name = str(case.op.name)
        report["registered"][name] = [
            torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta"),
            singleton.find(name).fake_impl.kernel is not None]
        if name in %(cpp)r:
            testing.check_opcheck(case)
            testing.check_compile(case, backend="aot_eager")
            report["checked"].append(case.id)
            # FakeTensor with symbolic sizes: the C++ Meta kernel's output matches the real one.
            args, kwargs = case.inputs(sizes={n: v * 2 for n, v in case.sample.dims})
            real = case.overload(*args, **kwargs)
            mode = FakeTensorMode(shape_env=ShapeEnv())
            def fake(x):
                if not isinstance(x, torch.Tensor):
                    return [fake(y) for y in x] if isinstance(x, list) else x
                ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * x.dim())
                return mode.from_tensor(x, symbolic_context=ctx)
            fargs = [fake(a) for a in args]
            fkwargs = {k: fake(v) for k, v in kwargs.items()}
            with mode:
                out = case.overload(*fargs, **fkwargs)
            reals = real if isinstance(real, tuple) else (real,) if real is not None else ()
            outs = out if isinstance(out, tuple) else (out,) if out is not None else ()
            for r, o in zip(reals, outs):
                assert o.dtype == r.dtype, (case.id, o.dtype, r.dtype)
                hints = [s.node.hint if isinstance(s, torch.SymInt) else s for s in o.shape]
                assert hints == list(r.shape), (case.id, o.shape, r.shape)
                report["symbolic"].append(any(isinstance(s, torch.SymInt) for s in o.shape))
    print("REPORT", json.dumps(report))
""")


def _built_and_run(tmp_path, op_files: dict[str, str], kernels: dict[str, str], check: str, *,
                   warning_free: bool = False, **values) -> str:
    """Generate and build `op_files` with `kernels` in a project of their own (warning-free where
    asked), then run `check` there, formatted with `files` (the op files' paths) and `values`:
    its output, once it has succeeded."""
    root = tmp_path / "root"
    scratch.make_root(root, op_files, kernels)
    for step in (scratch.generate, scratch.build):
        proc = step(root)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        if warning_free and step is scratch.build:
            assert "warning" not in proc.stdout + proc.stderr
    files = [str(root / "schemas" / name) for name in op_files]
    proc = scratch.python(root, check % {"files": files, **values}, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.e2e
def test_meta_kernels_built_and_run(tmp_path, monkeypatch):
    lib = _lib(monkeypatch)
    cpp = sorted(str(op.name) for op in lib.ops if py_fake.uses_cpp_meta(op))
    root = tmp_path / "root"
    scratch.make_root(root, {"shapes.yaml": (ROOT / SHAPES).read_text(encoding="utf-8")}, {})
    gen = scratch.generate(root)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    built = scratch.build(root)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "warning" not in built.stdout + built.stderr
    proc = scratch.python(root, CHECK % {"shapes": str(root / "schemas" / "shapes.yaml"),
                                         "cpp": cpp}, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.split("REPORT", 1)[1])
    for name, (has_meta, has_py_fake) in report["registered"].items():
        if name in cpp:
            assert has_meta and not has_py_fake, name
        elif name in PYTHON_FAKES:
            assert has_py_fake, name
    assert {c.split("[")[0] for c in report["checked"]} == set(cpp)
    assert any(report["symbolic"])


def test_schema_hash_covers_compiled_rules(tmp_path):
    """A rule compiled into the library changes its schema hash (a stale build is refused); a
    rule that stays Python does not (no rebuild needed)."""
    from codegen.dest.cpp_stamp import schema_hash

    def hash_of(rule_a: str, rule_b: str) -> str:
        p = tmp_path / "h.yaml"
        p.write_text("namespace: h\nops:\n"
                     "  - func: a(Tensor self) -> Tensor\n"
                     f"    dispatch: {{CPU: a_cpu}}\n    fake: {rule_a}\n"
                     "  - func: b(Tensor self) -> Tensor\n"
                     f"    dispatch: {{CPU: b_cpu}}\n    fake: {rule_b}\n", encoding="utf-8")
        return schema_hash(load_library([str(p)]), "h")

    base = hash_of("like(self)", "empty([dynamic()])")
    assert hash_of("like(self, dtype=int64)", "empty([dynamic()])") != base
    assert hash_of("like(self)", "empty([dynamic(min=1)])") == base


def test_a_returned_optional_argument(tmp_path, monkeypatch):
    """FlashAttention-3's `Tensor(out!)? out` returned as `Tensor(out!)`: with `out` None the
    kernel returns a new tensor, so it returns by value (there is no argument to hand back by
    reference) and the fake, whose item says what that new tensor is, stays Python."""
    from codegen.api import cpp

    monkeypatch.chdir(tmp_path)
    (tmp_path / "o.yaml").write_text(textwrap.dedent("""\
        namespace: optret
        ops:
          - func: relu_into(Tensor x, Tensor(a!)? out=None) -> Tensor(a!)
            dispatch: {CPU: relu_into_cpu}
            fake: like(x)
          - func: combine(Tensor x, Tensor(a!)? out=None) -> (Tensor(a!), Tensor)
            dispatch: {CPU: combine_cpu}
            fake: (like(x), empty([x.size(0)]))
        """))
    ops = {op.name.name: op for op in load_library(["o.yaml"]).ops}
    assert cpp.signature(ops["relu_into"].schema).decl("k") == \
        "at::Tensor k(const at::Tensor& x, const std::optional<at::Tensor>& out)"
    assert cpp.signature(ops["combine"].schema).returns.cpp() == \
        "std::tuple<at::Tensor, at::Tensor>"
    assert cpp_meta.translate(ops["relu_into"])[0] is None
    assert not py_fake.uses_cpp_meta(ops["combine"])


NARROW_FULL = """\
namespace: narrowfull
ops:
  - func: pick(Tensor src, Tensor? out, int? n, SymInt? s, int[]? shape) -> Tensor
    dispatch: {CPU: pick_cpu}
    fake: |
      check(out is None or out.size(1) == src.size(1), "out needs src's columns");
      like(out) if out is not None else (empty([n, src.size(1)]) if n is not None else (empty([s, src.size(1)]) if s is not None else (empty(shape) if shape is not None else like(src))))
    samples:
      - {src: {shape: [N=3, M=2]}, out: {shape: [K=4, M]}, n: null, s: null, shape: null}
      - {src: {shape: [N=3, M=2]}, out: null, n: 5, s: null, shape: null}
      - {src: {shape: [N=3, M=2]}, out: null, n: null, s: K=4, shape: null}
      - {src: {shape: [N=3, M=2]}, out: null, n: null, s: null, shape: [2, 6]}
      - {src: {shape: [N=3, M=2]}, out: null, n: null, s: null, shape: null}
  - func: flags(Tensor src, bool? per_row, str? mode, int? k, ScalarType? dtype) -> Tensor
    dispatch: {CPU: flags_cpu}
    fake: |
      empty([src.size(0)]) if per_row is not None and per_row else (like(src) if mode is not None and mode == "same" else (empty([k]) if k is not None and k > 2 else (empty([1], dtype=dtype) if dtype is not None and dtype == float64 else empty([2]))))
    samples:
      - {src: {shape: [N=3, 2]}, per_row: true, mode: null, k: null, dtype: null}
      - {src: {shape: [N=3, 2]}, per_row: false, mode: same, k: null, dtype: null}
      - {src: {shape: [N=3, 2]}, per_row: null, mode: other, k: 4, dtype: null}
      - {src: {shape: [N=3, 2]}, per_row: null, mode: null, k: 1, dtype: float64}
      - {src: {shape: [N=3, 2]}, per_row: null, mode: null, k: null, dtype: null}
"""
NARROW_FULL_CPP = """\
#include <ATen/ATen.h>
#include <narrowfull/narrow_full.h>
namespace narrowfull {
at::Tensor flags_cpu(const at::Tensor& src, std::optional<bool> per_row,
                     std::optional<c10::string_view> mode, std::optional<int64_t> k,
                     std::optional<at::ScalarType> dtype) {
  if (per_row.value_or(false)) return at::ones({src.size(0)}, src.options());
  if (mode.has_value() && *mode == "same") return at::ones_like(src);
  if (k.has_value() && *k > 2) return at::ones({*k}, src.options());
  if (dtype == at::kDouble) return at::ones({1}, src.options().dtype(at::kDouble));
  return at::ones({2}, src.options());
}
at::Tensor pick_cpu(const at::Tensor& src, const std::optional<at::Tensor>& out,
                    std::optional<int64_t> n, std::optional<c10::SymInt> s, at::OptionalIntArrayRef shape) {
  if (out.has_value()) return at::ones_like(*out);
  if (n.has_value()) return at::ones({*n, src.size(1)}, src.options());
  if (s.has_value()) return at::ones({s->expect_int(), src.size(1)}, src.options());
  if (shape.has_value()) return at::ones(*shape, src.options());
  return at::ones_like(src);
}
}  // namespace narrowfull
"""
NARROW_STABLE = """\
namespace: narrowstable
abi: stable
min_torch: "2.10"
ops:
  - func: pick(Tensor src, Tensor? out) -> Tensor
    dispatch: {CPU: pick_cpu}
    fake: like(out) if out is not None else like(src)
    samples:
      - {src: {shape: [N=3, 2]}, out: {shape: [K=4, 5]}}
      - {src: {shape: [N=3, 2]}, out: null}
  - func: flags(Tensor src, bool? per_row, str? mode) -> Tensor
    dispatch: {CPU: flags_cpu}
    fake: |
      like(src, dtype=float64) if per_row is not None and per_row else (like(src) if mode is not None and mode == "same" else like(src, dtype=int64))
    samples:
      - {src: {shape: [N=3, 2]}, per_row: true, mode: null}
      - {src: {shape: [N=3, 2]}, per_row: false, mode: same}
      - {src: {shape: [N=3, 2]}, per_row: null, mode: other}
"""
NARROW_STABLE_CPP = """\
#include <narrowstable/narrow_stable.h>
#include <torch/csrc/stable/ops.h>
namespace narrowstable {
torch::stable::Tensor flags_cpu(const torch::stable::Tensor& src, std::optional<bool> per_row,
                                const std::optional<std::string>& mode) {
  auto ones = torch::stable::fill_(torch::stable::empty_like(src), 1.0);
  if (per_row.value_or(false)) return torch::stable::to(ones, torch::headeronly::ScalarType::Double);
  if (mode.has_value() && *mode == "same") return ones;
  return torch::stable::to(ones, torch::headeronly::ScalarType::Long);
}
torch::stable::Tensor pick_cpu(const torch::stable::Tensor& src,
                               const std::optional<torch::stable::Tensor>& out) {
  auto r = torch::stable::empty_like(out.has_value() ? *out : src);
  return torch::stable::fill_(r, 1.0);
}
}  // namespace narrowstable
"""
NARROW_CHECK = """\
import json, torch, runtime
from codegen import testing
cases = testing.load_cases(%(files)r)
for c in cases:
    testing.check_opcheck(c)
    testing.check_compile(c, backend="aot_eager")
for ns in ("narrowfull", "narrowstable"):
    for op in (getattr(torch.ops, ns).pick.default, getattr(torch.ops, ns).flags.default):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "Meta"), op
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")
try:
    with torch._subclasses.fake_tensor.FakeTensorMode():
        torch.ops.narrowfull.pick(torch.empty(3, 2), torch.empty(4, 3), None, None, None)
except RuntimeError as e:
    print("CHECKED", e)
print("OK", len(cases))
"""


@pytest.mark.e2e
def test_narrowed_optionals_in_meta_kernels(tmp_path, monkeypatch):
    """A rule using an optional argument where a None test tells it is given
    (`like(out) if out is not None else ...`) compiles to a Meta kernel on both ABIs:
    `Tensor?`, `int?`, `SymInt?` and `int[]?` dereferenced in the branch that tested them, and
    `bool?`, `str?`, `int?` and `ScalarType?` as conditions there (apex's `per_tensor_python`)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.yaml").write_text(NARROW_FULL)
    (tmp_path / "s.yaml").write_text(NARROW_STABLE)
    ops = {str(op.name): op for op in load_library(["f.yaml", "s.yaml"]).ops}
    kernel = cpp_meta.translate(ops["narrowfull::pick"])[0]
    assert kernel is not None
    body = "\n".join(kernel.body)
    assert "(*out)" in body and "c10::SymInt(*n)" in body and "c10::fromIntArrayRefSlow(*shape)" in body
    flags = "\n".join(cpp_meta.translate(ops["narrowfull::flags"])[0].body)
    assert "(*per_row)" in flags and '((*mode) == "same")' in flags and "((*k) > int64_t{2})" in flags
    assert "((*dtype) == at::ScalarType::Double)" in flags and "c10::SymInt(*k)" in flags
    assert py_fake.uses_cpp_meta(ops["narrowstable::pick"])
    assert py_fake.uses_cpp_meta(ops["narrowstable::flags"])
    out = _built_and_run(
        tmp_path, {"narrow_full.yaml": NARROW_FULL, "narrow_stable.yaml": NARROW_STABLE},
        {"narrowfull/k.cpp": NARROW_FULL_CPP, "narrowstable/k.cpp": NARROW_STABLE_CPP},
        NARROW_CHECK)
    assert "CHECKED narrowfull::pick: out needs src's columns" in out
    assert "OK 15" in out


ITEMSIZE_FULL = """\
namespace: itemfull
ops:
  - func: as_bytes(Tensor A) -> Tensor
    dispatch: {CPU: as_bytes_cpu}
    fake: empty([A.numel() * A.element_size()], dtype=uint8)
    samples:
      - {A: {shape: [3, 5]}}
      - {A: {shape: [3, 5], dtype: float16}}
  - func: widen(Tensor A, ScalarType dtype) -> Tensor
    dispatch: {CPU: widen_cpu}
    fake: check(dtype.itemsize >= A.dtype.itemsize, "widen narrows"); empty([A.numel() * dtype.itemsize], dtype=uint8)
    samples:
      - {A: {shape: [2, 3]}, dtype: float64}
      - {A: {shape: [2, 3], dtype: int8}, dtype: int16}
"""
ITEMSIZE_FULL_CPP = """\
#include <ATen/ATen.h>
#include <itemfull/itemsize_full.h>
namespace itemfull {
at::Tensor as_bytes_cpu(const at::Tensor& A) {
  return A.contiguous().reshape(-1).view(at::kByte).clone();
}
at::Tensor widen_cpu(const at::Tensor& A, at::ScalarType dtype) {
  return A.to(dtype).reshape(-1).view(at::kByte).clone();
}
}  // namespace itemfull
"""
ITEMSIZE_STABLE = """\
namespace: itemstable
abi: stable
min_torch: "2.10"
ops:
  - func: wide_only(Tensor A) -> Tensor
    dispatch: {CPU: wide_only_cpu}
    fake: check(A.element_size() >= 4, "A needs 4-byte elements"); like(A)
    samples:
      - {A: {shape: [N=3, 2]}}
      - {A: {shape: [N=3, 2], dtype: float64}}
"""
ITEMSIZE_STABLE_CPP = """\
#include <itemstable/itemsize_stable.h>
#include <torch/csrc/stable/ops.h>
namespace itemstable {
torch::stable::Tensor wide_only_cpu(const torch::stable::Tensor& A) {
  return torch::stable::fill_(torch::stable::empty_like(A), 1.0);
}
}  // namespace itemstable
"""
ITEMSIZE_CHECK = """\
import torch, runtime
from torch._library.simple_registry import singleton
from codegen import testing
cases = testing.load_cases(%(files)r)
for c in cases:
    testing.check_opcheck(c)
    testing.check_compile(c, backend="aot_eager")
for name in ("itemfull::as_bytes", "itemfull::widen", "itemstable::wide_only"):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta"), name
    assert singleton.find(name).fake_impl.kernel is None, name
for f, args in ((torch.ops.itemfull.widen, (torch.empty(3, dtype=torch.float64), torch.int8)),
                (torch.ops.itemstable.wide_only, (torch.empty(3, dtype=torch.float16),))):
    try:
        with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
            f(mode.from_tensor(args[0]), *args[1:])
    except RuntimeError as e:
        print("CHECKED", str(e).splitlines()[0])
print("OK", len(cases))
"""


@pytest.mark.e2e
def test_narrowed_bool_and_str_conditions_in_meta_kernels(tmp_path, monkeypatch):
    """torchaudio's load_audio_file(..., bool? normalize, ..., str? format): an optional bool or
    str where a None test tells it is given, as a condition or compared, is dereferenced in a
    Meta kernel on both ABIs (the full ABI kept a Python fake; a stable namespace before
    min_torch 2.13 refused the rule)."""
    from codegen.dest import cpp_stable

    monkeypatch.chdir(tmp_path)
    rule = ("like(x) if (normalize is None or normalize) and (fmt is None or fmt == 'wav') "
            "else like(x, dtype=int16)")
    for ns, head in (("nbfull", ""), ("nbstable", 'abi: stable\nmin_torch: "2.10"\n')):
        (tmp_path / f"{ns}.yaml").write_text(
            f"namespace: {ns}\n{head}ops:\n"
            "  - func: load_dtype(Tensor x, bool? normalize, str? fmt) -> Tensor\n"
            "    dispatch: {CPU: load_dtype_cpu}\n"
            f'    fake: "{rule}"\n')
    ops = {str(op.name): op for op in load_library(["nbfull.yaml", "nbstable.yaml"]).ops}
    full = cpp_meta.translate(ops["nbfull::load_dtype"])[0]
    assert full is not None
    assert "((!normalize.has_value() || (*normalize)) && (!fmt.has_value() || ((*fmt) == " \
        '"wav")))' in "\n".join(full.body), full.body
    stable = cpp_stable.translate_meta(ops["nbstable::load_dtype"])
    assert stable is not None
    assert '((!normalize.has_value() || (*normalize)) && (!fmt.has_value() || (*fmt) == "wav"))' \
        in "\n".join(stable.body), stable.body


def test_itemsize_translates_on_the_stable_abi(tmp_path, monkeypatch):
    from codegen.dest import cpp_stable

    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(ITEMSIZE_STABLE)
    [op] = load_library(["s.yaml"]).ops
    meta = cpp_stable.translate_meta(op)
    assert meta is not None and meta.body[0] == \
        "if (!(static_cast<int64_t>(A.element_size()) >= 4)) {"


@pytest.mark.e2e
@pytest.mark.slow
def test_itemsize_in_meta_kernels(tmp_path):
    """Sizes and checks from the byte size of a dtype are Meta kernels, built and run with two
    dtypes each: c10::elementSize on the full ABI, Tensor::element_size() on the stable one."""
    out = _built_and_run(
        tmp_path, {"itemsize_full.yaml": ITEMSIZE_FULL, "itemsize_stable.yaml": ITEMSIZE_STABLE},
        {"itemfull/k.cpp": ITEMSIZE_FULL_CPP, "itemstable/k.cpp": ITEMSIZE_STABLE_CPP},
        ITEMSIZE_CHECK)
    assert "CHECKED itemfull::widen: widen narrows" in out
    assert "CHECKED itemstable::wide_only: A needs 4-byte elements" in out
    assert "OK 6" in out


LENGTHS_FULL = """\
namespace: lenfull
ops:
  - func: lengths(Tensor x, bool[] keep, str[] names, Tensor?[] maybe, float[]? weights) -> Tensor
    dispatch: {CPU: lengths_cpu}
    fake: empty([x.size(0), len(keep), len(names), len(maybe), len(weights) if weights is not None else 0])
    samples:
      - {x: {shape: [N=2]}, keep: [true, false, true], names: [a], maybe: [{shape: [1]}, null], weights: [0.5]}
      - {x: {shape: [N=2]}, keep: [], names: [a, b], maybe: [], weights: null}
"""
LENGTHS_FULL_CPP = """\
#include <ATen/ATen.h>
#include <lenfull/lengths_full.h>
namespace lenfull {
at::Tensor lengths_cpu(const at::Tensor& x, const c10::List<bool>& keep,
                       at::ArrayRef<c10::string_view> names,
                       const c10::List<std::optional<at::Tensor>>& maybe,
                       std::optional<at::ArrayRef<double>> weights) {
  const int64_t w = weights.has_value() ? static_cast<int64_t>(weights->size()) : 0;
  return at::zeros({x.size(0), static_cast<int64_t>(keep.size()),
                    static_cast<int64_t>(names.size()), static_cast<int64_t>(maybe.size()), w},
                   x.options());
}
}  // namespace lenfull
"""
LENGTHS_STABLE = """\
namespace: lenstable
abi: stable
min_torch: "2.10"
ops:
  - func: masked(Tensor x, bool[] keep, float[] weights) -> Tensor
    dispatch: {CPU: masked_cpu}
    fake: check(len(keep) == len(weights), "keep and weights differ"); like(x)
    samples:
      - {x: {shape: [N=3]}, keep: [true, false], weights: [0.5, 2.0]}
"""
LENGTHS_STABLE_CPP = """\
#include <lenstable/lengths_stable.h>
#include <torch/csrc/stable/ops.h>
namespace lenstable {
torch::stable::Tensor masked_cpu(const torch::stable::Tensor& x, const std::vector<bool>& keep,
                                 torch::headeronly::HeaderOnlyArrayRef<double> weights) {
  STD_TORCH_CHECK(keep.size() == weights.size(), "keep and weights differ");
  return torch::stable::fill_(torch::stable::empty_like(x), 1.0);
}
}  // namespace lenstable
"""
LENGTHS_CHECK = """\
import torch, runtime
from torch._library.simple_registry import singleton
from codegen import testing
cases = testing.load_cases(%(files)r)
for c in cases:
    testing.check_opcheck(c)
    testing.check_compile(c, backend="aot_eager")
for name in ("lenfull::lengths", "lenstable::masked"):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta"), name
    assert singleton.find(name).fake_impl.kernel is None, name
try:
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        torch.ops.lenstable.masked(mode.from_tensor(torch.ones(3)), [True], [0.5, 1.0])
except RuntimeError as e:
    print("CHECKED", str(e).splitlines()[0])
print("OK", len(cases))
"""


@pytest.mark.e2e
@pytest.mark.slow
def test_len_of_any_list_in_meta_kernels(tmp_path):
    """The length of a `bool[]`, `str[]`, `Tensor?[]`, given `float[]?` (full ABI) or `bool[]`
    and `float[]` (stable ABI) argument is its C++ list's size() in a Meta kernel: built and run
    (before, the rules were refused: "cannot be used in a fake rule")."""
    out = _built_and_run(
        tmp_path, {"lengths_full.yaml": LENGTHS_FULL, "lengths_stable.yaml": LENGTHS_STABLE},
        {"lenfull/k.cpp": LENGTHS_FULL_CPP, "lenstable/k.cpp": LENGTHS_STABLE_CPP},
        LENGTHS_CHECK)
    assert "CHECKED lenstable::masked: keep and weights differ" in out
    assert "OK 3" in out


FLAGS_FULL = """\
namespace: flagfull
ops:
  # SHI-Labs/NATTEN src/natten/ops/unfused/torch_library_ops.py: one causal flag per dim
  - func: flagged(Tensor query, Tensor? bias, SymInt[] kernel_size, bool[] is_causal) -> Tensor
    dispatch: {CPU: flagged_cpu}
    fake: >-
      check(not (is_causal[0] and bias is not None), "causal attention takes no bias");
      empty(query.shape[:-1] + [kernel_size[0] * kernel_size[-1] if is_causal[-1] else kernel_size[0]])
    samples:
      - {query: {shape: [N=3, 4]}, bias: {shape: [4]}, kernel_size: [2, 3], is_causal: [false, true]}
      - {query: {shape: [N=3, 4]}, bias: null, kernel_size: [2, 3], is_causal: [true, false]}
"""
FLAGS_FULL_CPP = """\
#include <ATen/ATen.h>
#include <flagfull/flags_full.h>
namespace flagfull {
at::Tensor flagged_cpu(const at::Tensor& query, const std::optional<at::Tensor>& bias,
                       c10::SymIntArrayRef kernel_size, const c10::List<bool>& is_causal) {
  TORCH_CHECK(!(is_causal.get(0) && bias.has_value()), "causal attention takes no bias");
  const int64_t k0 = kernel_size[0].expect_int(), k1 = kernel_size.back().expect_int();
  return at::zeros({query.size(0), is_causal.get(is_causal.size() - 1) ? k0 * k1 : k0},
                   query.options());
}
}  // namespace flagfull
"""
FLAGS_STABLE = """\
namespace: flagstable
abi: stable
min_torch: "2.10"
ops:
  - func: flagged(Tensor query, Tensor? bias, bool[] is_causal) -> Tensor
    dispatch: {CPU: flagged_cpu}
    fake: >-
      check(not (is_causal[0] and bias is not None), "causal attention takes no bias");
      like(query) if is_causal[-1] else like(query, dtype=float64)
    samples:
      - {query: {shape: [N=3, 4]}, bias: {shape: [4]}, is_causal: [false, true]}
      - {query: {shape: [N=3, 4]}, bias: null, is_causal: [true, false]}
"""
FLAGS_STABLE_CPP = """\
#include <flagstable/flags_stable.h>
#include <torch/csrc/stable/ops.h>
namespace flagstable {
torch::stable::Tensor flagged_cpu(const torch::stable::Tensor& query,
                                  const std::optional<torch::stable::Tensor>& bias,
                                  const std::vector<bool>& is_causal) {
  STD_TORCH_CHECK(!(is_causal[0] && bias.has_value()), "causal attention takes no bias");
  auto out = torch::stable::empty_like(query);
  if (!is_causal.back()) {
    out = torch::stable::to(out, torch::headeronly::ScalarType::Double);
  }
  return torch::stable::fill_(out, 1.0);
}
}  // namespace flagstable
"""
FLAGS_CHECK = """\
import torch, runtime
from torch._library.simple_registry import singleton
from codegen import testing
cases = testing.load_cases(%(files)r)
for c in cases:
    testing.check_opcheck(c)
    testing.check_compile(c, backend="aot_eager")
for ns in ("flagfull", "flagstable"):
    name = ns + "::flagged"
    assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta"), name
    assert singleton.find(name).fake_impl.kernel is None, name
    flagged = getattr(torch.ops, ns).flagged
    extra = [[3, 3]] if ns == "flagfull" else []
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        q = mode.from_tensor(torch.ones(3, 4))
        for flags in ([True, False], []):
            try:
                flagged(q, mode.from_tensor(torch.ones(4)), *extra, flags)
            except Exception as e:
                print("CHECKED", ns, type(e).__name__, str(e).splitlines()[0])
print("OK", len(cases))
"""


def test_bool_list_items_in_meta_kernels(tmp_path, monkeypatch):
    """NATTEN's `bool[] is_causal` (a flag per dim) indexed in a rule is a condition fixed when
    traced: `meta_bool_at` reads the C++ list on both ABIs (it was refused: "only int lists and
    Tensor[] can be indexed")."""
    from codegen.dest import cpp_stable

    monkeypatch.chdir(tmp_path)
    (tmp_path / "full.yaml").write_text(FLAGS_FULL)
    (tmp_path / "stable.yaml").write_text(FLAGS_STABLE)
    ops = {str(op.name): op for op in load_library(["full.yaml", "stable.yaml"]).ops}
    full, helpers = cpp_meta.translate(ops["flagfull::flagged"])
    assert full is not None and "bool_at" in helpers
    body = "\n".join(full.body)
    assert "TORCH_CHECK(!((meta_bool_at(is_causal, 0) && bias.has_value()))" in body, body
    assert "(meta_bool_at(is_causal, (-1)) ? " in body, body
    stable = cpp_stable.translate_meta(ops["flagstable::flagged"])
    assert stable is not None and "bool_at" in stable.helpers
    assert "return (meta_bool_at(is_causal, (-1)) ? " in "\n".join(stable.body), stable.body


@pytest.mark.e2e
@pytest.mark.slow
def test_bool_list_items_built_and_run(tmp_path):
    """The Meta kernels reading `is_causal[i]`, built on both ABIs, agree with the kernels
    (opcheck, compile) and fail a precondition and an index out of range as Python would."""
    out = _built_and_run(
        tmp_path, {"flags_full.yaml": FLAGS_FULL, "flags_stable.yaml": FLAGS_STABLE},
        {"flagfull/k.cpp": FLAGS_FULL_CPP, "flagstable/k.cpp": FLAGS_STABLE_CPP},
        FLAGS_CHECK, warning_free=True)
    assert "CHECKED flagfull RuntimeError flagfull::flagged: causal attention takes no bias" in out
    assert "CHECKED flagfull IndexError list index 0 out of range for 0 flags" in out
    assert "CHECKED flagstable RuntimeError flagstable::flagged: causal attention takes no bias" \
        in out
    assert "list index 0 out of range for 0 flags" in out.split("CHECKED flagstable")[2], out
    assert "OK 4" in out


FLOOR_FULL = """\
namespace: floorfull
ops:
  - func: down(Tensor A, SymInt k) -> Tensor
    dispatch: {CPU: down_cpu}
    fake: empty([-(A.size(0) // k), A.size(0) % k - 2 * k, A.dim() // -2 + 2])
    samples:
      - {A: {shape: [N=7]}, k: -3}
      - {A: {shape: [N=8]}, k: -4}
      - {A: {shape: [N=9]}, k: -7}
  - func: blocks(Tensor A, int blocksize) -> Tensor
    dispatch: {CPU: blocks_cpu}
    fake: check(blocksize > 0, "blocksize must be positive"); empty([(A.numel() + blocksize - 1) // blocksize], dtype=float32)
    samples:
      - {A: {shape: [N=6, 5]}, blocksize: 4}
      - {A: {shape: [N=6, 5]}, blocksize: 7}
  - func: lead(Tensor src, int dim) -> Tensor
    dispatch: {CPU: lead_cpu}
    fake: empty(src.shape[:dim % src.dim()])
    samples:
      - {src: {shape: [N=3, 4, 5]}, dim: -1}
      - {src: {shape: [N=3, 4, 5]}, dim: -5}
      - {src: {shape: [N=3, 4, 5]}, dim: 2}
"""
FLOOR_FULL_CPP = """\
#include <ATen/ATen.h>
#include <floorfull/floor_full.h>
namespace floorfull {
namespace {
int64_t floordiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}
int64_t mod(int64_t a, int64_t b) { return a - floordiv(a, b) * b; }
}  // namespace
at::Tensor down_cpu(const at::Tensor& A, c10::SymInt k_) {
  const int64_t n = A.size(0), k = k_.expect_int();
  return at::ones({-floordiv(n, k), mod(n, k) - 2 * k, floordiv(A.dim(), -2) + 2}, A.options());
}
at::Tensor blocks_cpu(const at::Tensor& A, int64_t blocksize) {
  return at::ones({floordiv(A.numel() + blocksize - 1, blocksize)}, A.options().dtype(at::kFloat));
}
at::Tensor lead_cpu(const at::Tensor& src, int64_t dim) {
  return at::ones(src.sizes().slice(0, mod(dim, src.dim())), src.options());
}
}  // namespace floorfull
"""
# Opcheck and compile every sample; then, under FakeTensorMode with symbolic sizes and a symbolic
# negative `k`, the Meta kernel and the generated Python fake give the same sizes, and both
# refuse `// 0` (RuntimeError from TORCH_CHECK, ZeroDivisionError from Python).
FLOOR_CHECK = """\
import torch, runtime
from torch._library.simple_registry import singleton
from torch._subclasses.fake_tensor import FakeTensorMode
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic, StatelessSymbolicContext
from codegen import testing
import runtime._reg_floorfull as reg
cases = testing.load_cases(%(files)r)
for c in cases:
    testing.check_opcheck(c)
    testing.check_compile(c, backend="aot_eager")
for name in %(ops)r:
    assert torch._C._dispatch_has_kernel_for_dispatch_key("floorfull::" + name, "Meta"), name
    assert singleton.find("floorfull::" + name).fake_impl.kernel is None, name
env = ShapeEnv()
mode = FakeTensorMode(shape_env=env)
def sym(t):
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * t.dim())
    return mode.from_tensor(t, symbolic_context=ctx)
def same(op, fake, *args):
    with mode:
        a, b = op(*args), fake(*args)
    assert [str(s) for s in a.shape] == [str(s) for s in b.shape], (a.shape, b.shape)
    assert a.dtype == b.dtype
    return [s.node.hint if isinstance(s, torch.SymInt) else s for s in a.shape]
for n, kv in ((7, -3), (8, -4), (5, -7), (11, -2)):
    k = env.create_unspecified_symint_and_symbol(kv, ConstantSource(f"k{n}"), DimDynamic.DYNAMIC)
    A = sym(torch.empty(n))
    hints = same(torch.ops.floorfull.down, reg._down_fake, A, k)
    assert hints == [-(n // kv), n %% kv - 2 * kv, 1], hints
    print("SYMBOLIC", n, kv, hints, isinstance(k, torch.SymInt))
for n, bs in ((30, 4), (30, 7), (9, 9)):
    same(torch.ops.floorfull.blocks, reg._blocks_fake, sym(torch.empty(n, 1)), bs)
for d in (-1, -2, -5, 1):
    same(torch.ops.floorfull.lead, reg._lead_fake, sym(torch.empty(3, 4, 5)), d)
for op, fake, args in ((torch.ops.floorfull.down, reg._down_fake, (torch.empty(7), 0)),
                       (torch.ops.floorfull.lead, reg._lead_fake, (torch.empty(()), 1))):
    with FakeTensorMode() as m:
        x = m.from_tensor(args[0])
        try:
            op(x, *args[1:])
        except RuntimeError as e:
            print("META", str(e).splitlines()[0])
        try:
            fake(x, *args[1:])
        except ZeroDivisionError as e:
            print("PYTHON", e)
print("OK", len(cases))
"""


def test_floordiv_and_mod_translate(tmp_path, monkeypatch):
    """`//` and `%` become Meta kernels: floored on known values, c10::SymInt's own operators
    (Python's FloorDiv and PythonMod) on symbolic ones; fixed-at-trace-time operands stay int64."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.yaml").write_text(FLOOR_FULL)
    ops = {op.name.name: op for op in load_library(["f.yaml"]).ops}
    kernels = {n: cpp_meta.translate(op) for n, op in ops.items()}
    assert all(k is not None for k, _ in kernels.values())
    down, helpers = kernels["down"]
    assert helpers == {"empty", "floordiv", "floordiv_int", "mod", "mod_int"}
    assert down.body == (
        "return meta_empty(std::vector<c10::SymInt>{(-meta_floordiv(A.sym_size(0), k, "
        '"floorfull::down", "A.size(0) // k")), (meta_mod(A.sym_size(0), k, "floorfull::down", '
        '"A.size(0) % k") - (c10::SymInt(2) * k)), c10::SymInt((meta_floordiv_int(A.dim(), (-2), "floorfull::down", '
        '"A.dim() // -2") + 2))}, A, std::nullopt);',)
    lead, helpers = kernels["lead"]
    assert helpers == {"mod_int", "slice", "empty"}
    assert 'meta_mod_int(dim, src.dim(), "floorfull::lead", "dim % src.dim()")' in lead.body[0]
    diags = Diagnostics()
    (path, text), = cpp_register.generate(load_library(["f.yaml"]), diags,
                                          config.default_project(tmp_path)).items()
    assert "int64_t meta_floordiv_int(int64_t a, int64_t b, const char* op, const char* expr)" \
        in text
    assert "return a / b;" in text and "return a % b;" in text


@pytest.mark.e2e
@pytest.mark.slow   # shapes.yaml's ops compile the same forms in test_meta_kernels_built_and_run
def test_floordiv_and_mod_in_meta_kernels(tmp_path, monkeypatch):
    """Built and run: opcheck and one compiled graph per sample (negative divisors too); the Meta
    kernels agree with the Python fakes on symbolic sizes and a symbolic negative `k`; both refuse
    division by zero."""
    out = _built_and_run(
        tmp_path, {"floor_full.yaml": FLOOR_FULL},
        {"floorfull/k.cpp": FLOOR_FULL_CPP},
        FLOOR_CHECK,
        ops=["down", "blocks", "lead"])
    assert "SYMBOLIC 7 -3 [3, 4, 1] True" in out
    assert "META floorfull::down: integer division by zero in `A.size(0) // k`" in out
    assert "META floorfull::lead: integer modulo by zero in `dim % src.dim()`" in out
    assert out.count("PYTHON integer") == 2
    assert "OK 8" in out


BIND_FULL = """\
namespace: bindfull
ops:
  - func: scatter(Tensor src, int dim, int dim_size) -> Tensor
    dispatch: {CPU: scatter_cpu}
    fake: d = dim % src.dim(); empty(src.shape[:d] + [dim_size] + src.shape[d + 1:])
    samples:
      - {src: {shape: [N=4, 5, 6]}, dim: -2, dim_size: 3}
      - {src: {shape: [N=4, 5, 6]}, dim: 0, dim_size: 7}
      - {src: {shape: [N=4, 5, 6]}, dim: -1, dim_size: 2}
  - func: split(Tensor A, SymInt k, int auto_) -> Tensor
    dispatch: {CPU: split_cpu}
    fake: >-
      auto = A.size(0) // k; at = [-auto, A.size(0) % k - 2 * k]; meta_empty = auto_ // 2;
      unused = 1 // auto_; check(auto <= 0, "k must be negative"); empty(at + [meta_empty])
    samples:
      - {A: {shape: [N=7]}, k: -3, auto_: 5}
      - {A: {shape: [N=8]}, k: -4, auto_: 4}
"""
BIND_FULL_CPP = """\
#include <ATen/ATen.h>
#include <bindfull/bind_full.h>
namespace bindfull {
namespace {
int64_t floordiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}
int64_t mod(int64_t a, int64_t b) { return a - floordiv(a, b) * b; }
}  // namespace
at::Tensor scatter_cpu(const at::Tensor& src, int64_t dim, int64_t dim_size) {
  std::vector<int64_t> shape = src.sizes().vec();
  shape[mod(dim, src.dim())] = dim_size;
  return at::ones(shape, src.options());
}
at::Tensor split_cpu(const at::Tensor& A, c10::SymInt k_, int64_t auto_) {
  const int64_t n = A.size(0), k = k_.expect_int();
  return at::ones({-floordiv(n, k), mod(n, k) - 2 * k, floordiv(auto_, 2)}, A.options());
}
}  // namespace bindfull
"""
BIND_CHECK = """\
import torch, runtime
from torch._library.simple_registry import singleton
from torch._subclasses.fake_tensor import FakeTensorMode
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic, StatelessSymbolicContext
from codegen import testing
import runtime._reg_bindfull as reg
cases = testing.load_cases(%(files)r)
for c in cases:
    testing.check_opcheck(c)
    testing.check_compile(c, backend="aot_eager")
for name in ("scatter", "split"):
    assert torch._C._dispatch_has_kernel_for_dispatch_key("bindfull::" + name, "Meta"), name
    assert singleton.find("bindfull::" + name).fake_impl.kernel is None, name
env = ShapeEnv()
mode = FakeTensorMode(shape_env=env)
def sym(t):
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * t.dim())
    return mode.from_tensor(t, symbolic_context=ctx)
def same(op, fake, *args):
    with mode:
        a, b = op(*args), fake(*args)
    assert [str(s) for s in a.shape] == [str(s) for s in b.shape], (a.shape, b.shape)
    return [s.node.hint if isinstance(s, torch.SymInt) else s for s in a.shape]
for d in (-1, -3, 1, 5):
    print("SCATTER", d, same(torch.ops.bindfull.scatter, reg._scatter_fake, sym(torch.empty(4, 5, 6)), d, 9))
k = env.create_unspecified_symint_and_symbol(-3, ConstantSource("k"), DimDynamic.DYNAMIC)
print("SPLIT", same(torch.ops.bindfull.split, reg._split_fake, sym(torch.empty(7)), k, 5))
for args in ((torch.empty(7), 0, 5), (torch.empty(7), -3, 0), (torch.empty(7), 3, 4)):
    with FakeTensorMode() as m:
        x = m.from_tensor(args[0])
        try:
            torch.ops.bindfull.split(x, *args[1:])
        except RuntimeError as e:
            print("META", str(e).splitlines()[0])
        try:
            reg._split_fake(x, *args[1:])
        except (ZeroDivisionError, RuntimeError) as e:
            print("PYTHON", type(e).__name__)
print("OK", len(cases))
"""


def test_bindings_translate(tmp_path, monkeypatch):
    """Bindings are const locals before the outputs: int64_t when fixed at trace time
    (`d = dim % src.dim()`), c10::SymInt for sizes, a vector for shapes; named apart from C++
    keywords, parameters, helpers and namespaces; one nothing reads is still evaluated."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "b.yaml").write_text(BIND_FULL)
    ops = {op.name.name: op for op in load_library(["b.yaml"]).ops}
    scatter = cpp_meta.translate(ops["scatter"])[0]
    assert scatter.body == (
        'const int64_t d = meta_mod_int(dim, src.dim(), "bindfull::scatter", "dim % src.dim()");',
        "return meta_empty(meta_cat({c10::SymIntArrayRef(meta_cat({c10::SymIntArrayRef("
        "meta_slice(src.sym_sizes(), std::nullopt, d)), c10::SymIntArrayRef(std::vector<"
        "c10::SymInt>{c10::SymInt(dim_size)})})), c10::SymIntArrayRef(meta_slice(src.sym_sizes(), "
        "(d + 1), std::nullopt))}), src, std::nullopt);")
    split = cpp_meta.translate(ops["split"])[0]
    assert split.decl == "at::Tensor meta_split(const at::Tensor& A, c10::SymInt k, int64_t auto_)"
    assert split.body == (
        'const c10::SymInt auto__ = meta_floordiv(A.sym_size(0), k, "bindfull::split", '
        '"A.size(0) // k");',
        "const std::vector<c10::SymInt> at_ = c10::SymIntArrayRef(std::vector<c10::SymInt>{"
        '(-auto__), (meta_mod(A.sym_size(0), k, "bindfull::split", "A.size(0) % k") - '
        "(c10::SymInt(2) * k))}).vec();",
        'const int64_t meta_empty_ = meta_floordiv_int(auto_, 2, "bindfull::split", '
        '"auto_ // 2");',
        '[[maybe_unused]] const int64_t unused = meta_floordiv_int(1, auto_, "bindfull::split", '
        '"1 // auto_");',
        'TORCH_SYM_CHECK(auto__.sym_le(c10::SymInt(0)), "bindfull::split: k must be negative");',
        "return meta_empty(meta_cat({c10::SymIntArrayRef(at_), c10::SymIntArrayRef("
        "std::vector<c10::SymInt>{c10::SymInt(meta_empty_)})}), A, std::nullopt);")


@pytest.mark.e2e
@pytest.mark.slow   # shapes.yaml's ops compile the same forms in test_meta_kernels_built_and_run
def test_bindings_in_meta_kernels(tmp_path, monkeypatch):
    """Built and run: opcheck and one compiled graph per sample; on symbolic sizes and a symbolic
    negative `k` the Meta kernels agree with the Python fakes; both refuse division by zero, in
    an output's binding and in one nothing reads, and the same failed check."""
    out = _built_and_run(
        tmp_path, {"bind_full.yaml": BIND_FULL},
        {"bindfull/k.cpp": BIND_FULL_CPP},
        BIND_CHECK,
        warning_free=True)
    assert "SCATTER -1 [4, 5, 9]" in out and "SCATTER -3 [9, 5, 6]" in out
    assert "SCATTER 5 [4, 5, 9]" in out
    assert "SPLIT [3, 4, 2]" in out
    assert "META bindfull::split: integer division by zero in `A.size(0) // k`" in out
    assert "META bindfull::split: integer division by zero in `1 // auto_`" in out
    assert "META bindfull::split: k must be negative" in out
    assert out.count("PYTHON ZeroDivisionError") == 2
    assert out.count("PYTHON RuntimeError") == 1
    assert "OK 5" in out


# Conditionals whose branches are sizes or shapes, each condition fixed at trace time: PyG's
# `torch_sparse::non_diag_mask` (`k < 0`), `segment_min_csr` (a None test, the narrowed `out`
# dereferenced in its branch only) and a `str` test, a bool test and an int binding.
COND_FULL = """\
namespace: condfull
ops:
  - func: band(Tensor row, int M, int N, int k) -> Tensor
    dispatch: {CPU: band_cpu}
    fake: empty([row.size(0) + (min(M + k, N) if k < 0 else min(M, N - k))], dtype=bool)
    samples:
      - {row: {shape: [R=5]}, M: 3, N: 4, k: 0}
      - {row: {shape: [R=5]}, M: 3, N: 4, k: -2}
  - func: segmin(Tensor src, Tensor indptr, Tensor? out=None) -> (Tensor, Tensor)
    dispatch: {CPU: segmin_cpu}
    fake: >-
      sh = out.shape if out is not None else [indptr.size(0) - 1] + src.shape[1:];
      (empty(sh), empty(sh, dtype=int64))
    samples:
      - {src: {shape: [N=6, 3]}, indptr: {shape: [P=4]}}
      - {src: {shape: [N=6, 3]}, indptr: {shape: [P=4]}, out: {shape: [5, 2]}}
  - func: pick(Tensor x, str mode, bool keep) -> Tensor
    dispatch: {CPU: pick_cpu}
    fake: d = 0 if mode == "rows" else -1; empty(x.shape if keep else [x.size(d)])
    samples:
      - {x: {shape: [A=3, B=4]}, mode: rows, keep: false}
      - {x: {shape: [A=3, B=4]}, mode: cols, keep: false}
      - {x: {shape: [A=3, B=4]}, mode: cols, keep: true}
"""
COND_FULL_CPP = """\
#include <ATen/ATen.h>
#include <condfull/cond_full.h>
namespace condfull {
at::Tensor band_cpu(const at::Tensor& row, int64_t M, int64_t N, int64_t k) {
  const int64_t n = row.size(0) + (k < 0 ? std::min(M + k, N) : std::min(M, N - k));
  return at::zeros({n}, row.options().dtype(at::kBool));
}
std::tuple<at::Tensor, at::Tensor> segmin_cpu(const at::Tensor& src, const at::Tensor& indptr,
                                              const std::optional<at::Tensor>& out) {
  std::vector<int64_t> shape;
  if (out.has_value()) {
    shape = out->sizes().vec();
  } else {
    shape = src.sizes().vec();
    shape[0] = indptr.size(0) - 1;
  }
  return {at::zeros(shape, src.options()), at::zeros(shape, src.options().dtype(at::kLong))};
}
at::Tensor pick_cpu(const at::Tensor& x, c10::string_view mode, bool keep) {
  const int64_t d = mode == "rows" ? 0 : -1;
  return keep ? at::ones(x.sizes(), x.options()) : at::ones({x.size(d)}, x.options());
}
}  // namespace condfull
"""
# Every sample through opcheck and torch.compile(dynamic=True); then, on symbolic sizes, the Meta
# kernel and the Python fake agree on each branch of each conditional.
COND_CHECK = """\
import torch, runtime
from torch._library.simple_registry import singleton
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic, StatelessSymbolicContext
from codegen import testing
import runtime._reg_condfull as reg
cases = testing.load_cases(%(files)r)
for c in cases:
    testing.check_opcheck(c)
    testing.check_compile(c, backend="aot_eager")
for name in ("band", "segmin", "pick"):
    assert torch._C._dispatch_has_kernel_for_dispatch_key("condfull::" + name, "Meta"), name
    assert singleton.find("condfull::" + name).fake_impl.kernel is None, name
mode = FakeTensorMode(shape_env=ShapeEnv())
def sym(*shape):
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * len(shape))
    return mode.from_tensor(torch.empty(shape), symbolic_context=ctx)
def same(name, *args):
    op, fake = getattr(torch.ops.condfull, name), getattr(reg, "_%%s_fake" %% name)
    with mode:
        a, b = op(*args), fake(*args)
    a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
    for x, y in zip(a, b, strict=True):
        assert [str(s) for s in x.shape] == [str(s) for s in y.shape], (name, x.shape, y.shape)
        assert x.dtype == y.dtype, (name, x.dtype, y.dtype)
    shape = [s.node.hint if isinstance(s, torch.SymInt) else s for s in a[0].shape]
    print("SAME", name, shape, all(isinstance(s, torch.SymInt) for s in a[0].shape))
same("band", sym(7), 3, 4, 0)
same("band", sym(7), 3, 4, -2)
same("segmin", sym(6, 3), sym(4), None)
same("segmin", sym(6, 3), sym(4), sym(5, 2))
same("pick", sym(3, 4), "rows", False)
same("pick", sym(3, 4), "cols", False)
same("pick", sym(3, 4), "cols", True)
print("OK", len(cases))
"""


def test_conditional_sizes_and_shapes_translate(tmp_path, monkeypatch):
    """`a if cond else b` between sizes or shapes, its condition fixed at trace time, is a C++
    conditional of c10::SymInt or std::vector<c10::SymInt> (int64_t where every branch is fixed
    too); a branch is evaluated only when chosen, so `*out` only where `out` is given."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(COND_FULL)
    ops = {op.name.name: op for op in load_library(["c.yaml"]).ops}
    band = cpp_meta.translate(ops["band"])[0]
    assert band.body == (
        "return meta_empty(std::vector<c10::SymInt>{(row.sym_size(0) + ((k < int64_t{0}) ? "
        "(c10::SymInt(M) + c10::SymInt(k)).min(c10::SymInt(N)) : "
        "c10::SymInt(M).min((c10::SymInt(N) - c10::SymInt(k)))))}, row, at::ScalarType::Bool);",)
    segmin = cpp_meta.translate(ops["segmin"])[0]
    assert segmin.body == (
        "const std::vector<c10::SymInt> sh = c10::SymIntArrayRef((out.has_value() ? "
        "c10::SymIntArrayRef((*out).sym_sizes()).vec() : meta_cat({c10::SymIntArrayRef("
        "std::vector<c10::SymInt>{(indptr.sym_size(0) - c10::SymInt(1))}), c10::SymIntArrayRef("
        "meta_slice(src.sym_sizes(), 1, std::nullopt))}))).vec();",
        "return {meta_empty(sh, src, std::nullopt), meta_empty(sh, src, at::ScalarType::Long)};")
    pick = cpp_meta.translate(ops["pick"])[0]
    assert pick.body == (
        'const int64_t d = ((mode == "rows") ? 0 : (-1));',
        "return meta_empty((keep ? c10::SymIntArrayRef(x.sym_sizes()).vec() : "
        "std::vector<c10::SymInt>{x.sym_size(d)}), x, std::nullopt);")


def test_a_conditional_on_sizes_stays_python(tmp_path, monkeypatch):
    """A condition comparing sizes would specialize them: the rule language refuses it in an
    `if`, and were one to reach the translation (here put in by hand), the op keeps its Python
    fake."""
    import dataclasses
    from codegen import shape as S
    from codegen.diagnostics import UserError
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(COND_FULL)
    band = next(op for op in load_library(["c.yaml"]).ops if op.name.name == "band")
    (out,) = band.fake.outputs
    (item,) = out.shape.items
    on_sizes = S.Compare(S.CompareOp.lt, S.TensorSize(S.Arg("row", S.TENSOR), S.IntLit(0)),
                         S.IntLit(0))
    item = dataclasses.replace(item, right=dataclasses.replace(item.right, cond=on_sizes))
    out = dataclasses.replace(out, shape=dataclasses.replace(out.shape, items=(item,)))
    op = dataclasses.replace(band, fake=dataclasses.replace(band.fake, outputs=(out,)))
    assert cpp_meta.translate(band)[0] is not None
    assert cpp_meta.translate(op) == (None, frozenset())
    (tmp_path / "s.yaml").write_text(COND_FULL.replace("if k < 0", "if row.size(0) < 0"))
    with pytest.raises(UserError) as e:
        load_library(["s.yaml"])
    assert "'<' compares sizes, which only a check may do" in str(e.value)


@pytest.mark.e2e
@pytest.mark.slow   # shapes.yaml's ops compile the same forms in test_meta_kernels_built_and_run
def test_conditional_sizes_and_shapes_in_meta_kernels(tmp_path, monkeypatch):
    """Built and run: opcheck and torch.compile(dynamic=True) on samples taking each branch; on
    symbolic sizes the Meta kernels agree with the Python fakes, sizes still symbolic."""
    out = _built_and_run(
        tmp_path, {"cond_full.yaml": COND_FULL},
        {"condfull/k.cpp": COND_FULL_CPP},
        COND_CHECK,
        warning_free=True)
    for line in ("band [10] True", "band [8] True", "segmin [3, 3] True", "segmin [5, 2] True",
                 "pick [3] True", "pick [4] True", "pick [3, 4] True"):
        assert "SAME " + line in out, (line, out)
    assert "OK 7" in out


FLOOR_STABLE = """\
namespace: floorstable
abi: stable
min_torch: "2.10"
ops:
  - func: pick(Tensor src, int dim, int blocksize) -> Tensor
    dispatch: {CPU: pick_cpu}
    fake: >-
      std = dim % src.dim(); unused = 1 // blocksize; check(std >= 1, "dim is the batch dim");
      check(blocksize // -2 < 0, "blocksize must be positive"); like(src)
    samples:
      - {src: {shape: [N=3, 4, 5]}, dim: -4, blocksize: 1}
      - {src: {shape: [N=3, 4]}, dim: -1, blocksize: 8}
"""
FLOOR_STABLE_CPP = """\
#include <floorstable/floor_stable.h>
#include <torch/csrc/stable/ops.h>
namespace floorstable {
torch::stable::Tensor pick_cpu(const torch::stable::Tensor& src, int64_t, int64_t) {
  return torch::stable::fill_(torch::stable::empty_like(src), 1.0);
}
}  // namespace floorstable
"""
# Each call's verdict as the rule computes it in Python (the Python fake's arithmetic): the Meta
# kernel refuses exactly the calls Python refuses, by zero too.
FLOOR_STABLE_CHECK = """\
import torch, runtime
from torch._library.simple_registry import singleton
from codegen import testing
cases = testing.load_cases(%(files)r)
for c in cases:
    testing.check_opcheck(c)
    testing.check_compile(c, backend="aot_eager")
assert torch._C._dispatch_has_kernel_for_dispatch_key("floorstable::pick", "Meta")
def python(ndim, dim, blocksize):
    try:
        std = dim %% ndim
        unused = 1 // blocksize
        if not std >= 1:
            return "dim is the batch dim"
        if not blocksize // -2 < 0:
            return "blocksize must be positive"
    except ZeroDivisionError as e:
        return "ZeroDivisionError"
    return None
for shape, dim, blocksize in (((3, 4, 5), -4, 1), ((3, 4, 5), -3, 1), ((3, 4), 3, 2),
                              ((3, 4), -1, -1), ((), 0, 1), ((3,), 0, 0), ((3, 4), 1, 0)):
    expected = python(len(shape), dim, blocksize)
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        x = mode.from_tensor(torch.empty(shape))
        try:
            out = torch.ops.floorstable.pick(x, dim, blocksize)
            got = None
            assert out.shape == x.shape
        except RuntimeError as e:
            got = str(e).splitlines()[0]
    print("CALL", shape, dim, blocksize, expected, "|", got)
    assert (expected is None) == (got is None), (expected, got)
    if expected is not None and expected != "ZeroDivisionError":
        assert got == "floorstable::pick: " + expected, got
print("OK", len(cases))
"""


def test_floordiv_and_mod_on_the_stable_abi(tmp_path, monkeypatch):
    """On the stable ABI, `//`, `%` and bindings of ints fixed at trace time (no sizes: the stable
    ABI reads them as int64_t) are plain C++ with Python's semantics, exact at any min_torch."""
    from codegen.dest import cpp_stable

    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(FLOOR_STABLE)
    [op] = load_library(["s.yaml"]).ops
    meta = cpp_stable.translate_meta(op)
    assert meta is not None and meta.helpers == {"floordiv", "mod"}
    assert meta.body[:4] == (
        'const int64_t std_ = meta_mod(dim, src.dim(), "floorstable::pick", "dim % src.dim()");',
        '[[maybe_unused]] const int64_t unused = meta_floordiv(1, blocksize, "floorstable::pick", '
        '"1 // blocksize");',
        "if (!(std_ >= 1)) {",
        '  throw std::runtime_error("floorstable::pick: dim is the batch dim");')
    assert 'if (!(meta_floordiv(blocksize, (-2), "floorstable::pick", "blocksize // -2") < 0)) {' \
        in meta.body


@pytest.mark.e2e
def test_floordiv_and_mod_in_stable_meta_kernels(tmp_path, monkeypatch):
    """Built on the stable ABI and run: opcheck and a compiled graph per sample; the Meta kernel
    accepts and refuses the calls the rule's Python arithmetic does (negative operands, `%` and
    `//` by zero with the op and the expression named)."""
    out = _built_and_run(
        tmp_path, {"floor_stable.yaml": FLOOR_STABLE},
        {"floorstable/k.cpp": FLOOR_STABLE_CPP},
        FLOOR_STABLE_CHECK,
        warning_free=True)
    assert "CALL (3, 4, 5) -4 1 None | None" in out
    assert ("CALL () 0 1 ZeroDivisionError | floorstable::pick: integer modulo by zero in "
            "`dim % src.dim()`") in out
    assert ("CALL (3,) 0 0 ZeroDivisionError | floorstable::pick: integer division by zero in "
            "`1 // blocksize`") in out
    assert "OK 2" in out


GROUPED = """\
namespace: grouped
ops:
  - func: grouped_mm(Tensor x, Tensor s_group, int size_k) -> Tensor
    dispatch: {CPU: grouped_mm_cpu}
    fake: >-
      check(s_group.numel() == 0 or size_k // s_group.size(0) == 4, "Unexpected groupsize");
      check(not (s_group.numel() != 0 and size_k % s_group.size(0) != 0), "groups must divide K");
      like(x)
    samples:
      - {x: {shape: [N=3, 8]}, s_group: {shape: [0, 8]}, size_k: 8}
      - {x: {shape: [N=3, 8]}, s_group: {shape: [2, 8]}, size_k: 8}
"""
GROUPED_CPP = """\
#include <ATen/ATen.h>
#include <grouped/grouped.h>
namespace grouped {
at::Tensor grouped_mm_cpu(const at::Tensor& x, const at::Tensor& s_group, int64_t size_k) {
  TORCH_CHECK(s_group.numel() == 0 || size_k / s_group.size(0) == 4, "Unexpected groupsize");
  return x.clone();
}
}  // namespace grouped
"""
GROUPED_CHECK = """\
import torch, runtime
from torch._subclasses.fake_tensor import FakeTensorMode
from codegen import testing
import runtime._reg_grouped as reg
cases = testing.load_cases(%(files)r)
for c in cases:
    testing.check_opcheck(c)
    testing.check_compile(c, backend="aot_eager")
assert torch._C._dispatch_has_kernel_for_dispatch_key("grouped::grouped_mm", "Meta")
for rows, k in ((0, 8), (2, 8), (3, 8), (4, 6)):
    with FakeTensorMode() as m:
        x, s = m.from_tensor(torch.empty(3, 8)), m.from_tensor(torch.empty(rows, 8))
        for name, fn in (("META", torch.ops.grouped.grouped_mm), ("PYTHON", reg._grouped_mm_fake)):
            try:
                fn(x, s, k)
                print(name, rows, k, "ok")
            except RuntimeError as e:
                print(name, rows, k, str(e).splitlines()[0])
print("OK", len(cases))
"""


def test_a_check_or_divides_only_where_python_would(tmp_path, monkeypatch):
    """torchao's marlin_qqq_gemm has no groups when s_group is empty: `check(s_group.numel() == 0
    or size_k // s_group.size(0) == 4)` divided by that zero (`|` and sym_or evaluate both sides).
    A left side known when traced decides alone, in the Meta kernel and the Python fake."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.yaml").write_text(GROUPED)
    (op,) = load_library(["g.yaml"]).ops
    kernel, helpers = cpp_meta.translate(op)
    assert kernel is not None and {"or", "and"} <= helpers
    assert "meta_or(s_group.sym_numel().sym_eq(c10::SymInt(0)), [&] { return " in kernel.body[0]


@pytest.mark.e2e
@pytest.mark.slow
def test_a_check_or_divides_only_where_python_would_built(tmp_path):
    out = _built_and_run(
        tmp_path, {"grouped.yaml": GROUPED},
        {"grouped/k.cpp": GROUPED_CPP},
        GROUPED_CHECK)
    for name in ("META", "PYTHON"):
        assert f"{name} 0 8 ok" in out and f"{name} 2 8 ok" in out
        assert f"{name} 3 8 grouped::grouped_mm: Unexpected groupsize" in out
        assert f"{name} 4 6 grouped::grouped_mm: Unexpected groupsize" in out
    assert "OK 2" in out


def test_a_condition_on_ranks_and_lengths_translates(tmp_path, monkeypatch):
    """torchao's float8_linear_cpu takes N from a prepacked 4D weight or a plain 2D one: a rank
    or a list's length compared in an `if` is an int64_t in the Meta kernel (the rule stayed a
    Python fake)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.yaml").write_text(
        "namespace: rk\nops:\n"
        "  - func: packed_rows(Tensor weight, int[] sizes) -> Tensor\n"
        "    dispatch: {CPU: k}\n"
        "    fake: \"n = weight.size(0) * weight.size(3) if weight.dim() == 4 else weight.size(0);"
        " empty([n, len(sizes)] if len(sizes) > 1 else [n])\"\n")
    (op,) = load_library(["r.yaml"]).ops
    kernel, _ = cpp_meta.translate(op)
    assert kernel is not None
    assert kernel.body[0] == (
        "const c10::SymInt n = ((weight.dim() == int64_t{4}) ? "
        "(weight.sym_size(0) * weight.sym_size(3)) : weight.sym_size(0));")
    assert "((static_cast<int64_t>(c10::fromIntArrayRefSlow(sizes).size()) > int64_t{1}) ? " \
        in kernel.body[1]


def test_a_condition_on_a_tensor_s_dtype_translates(tmp_path, monkeypatch):
    """A tensor's dtype compared in an `if` (TensorRT-LLM's moe_permute branches on
    `input.dtype`) is its scalar_type() in the Meta kernel."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.yaml").write_text(
        "namespace: dtcond\nops:\n"
        "  - func: widen(Tensor input, Tensor scale) -> Tensor\n"
        "    dispatch: {CPU: k}\n"
        "    fake: \"empty([input.size(0) * 2]) if input.dtype in (uint8, int8) else"
        " like(input, dtype=promote_types(input.dtype, scale.dtype))\"\n")
    (op,) = load_library(["d.yaml"]).ops
    kernel, _ = cpp_meta.translate(op)
    assert kernel is not None
    assert kernel.body[0].startswith(
        "return (((input.scalar_type() == at::ScalarType::Byte) || "
        "(input.scalar_type() == at::ScalarType::Char)) ? ")


FLOATS = """\
namespace: floatck
ops:
  - func: qsdpa(Tensor q, float dropout_p=0.0, float scale=1.0) -> Tensor
    dispatch: {CPU: qsdpa_cpu}
    fake: 'check(dropout_p == 0.0, "dropout is not supported"); check(0 < scale and scale <= 1e3, "scale out of range"); like(q)'
    samples:
      - {q: {shape: [N=3, 4]}, scale: 0.5}
"""
FLOATS_CPP = """\
#include <ATen/ATen.h>
#include <floatck/floats.h>
namespace floatck {
at::Tensor qsdpa_cpu(const at::Tensor& q, double dropout_p, double scale) {
  return q * scale;
}
}  // namespace floatck
"""
FLOATS_CHECK = """\
import torch, runtime
from torch._subclasses.fake_tensor import FakeTensorMode
from codegen import testing
import runtime._reg_floatck as reg
for c in testing.load_cases(%(files)r):
    testing.check_opcheck(c)
    testing.check_compile(c, backend="aot_eager")
assert torch._C._dispatch_has_kernel_for_dispatch_key("floatck::qsdpa", "Meta")
for p, s in ((0.0, 0.5), (0.1, 0.5), (0.0, 0.0), (0.0, 2e3)):
    with FakeTensorMode() as m:
        x = m.from_tensor(torch.empty(3, 4))
        for name, fn in (("META", torch.ops.floatck.qsdpa), ("PYTHON", reg._qsdpa_fake)):
            try:
                fn(x, p, s)
                print(name, p, s, "ok")
            except RuntimeError as e:
                print(name, p, s, str(e).splitlines()[0])
"""


def test_a_check_compares_float_arguments_with_numbers(tmp_path, monkeypatch):
    """torchao's quantized SDPA supports no dropout: `check(dropout_p == 0.0)` compares a float
    argument with a number (it was refused as a comparison of a number argument), in the Meta
    kernels of both ABIs."""
    from codegen.dest import cpp_stable

    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.yaml").write_text(FLOATS)
    (op,) = load_library(["f.yaml"]).ops
    kernel, _ = cpp_meta.translate(op)
    assert kernel is not None and kernel.body[:3] == (
        'TORCH_CHECK((dropout_p == double{0.0}), "floatck::qsdpa: dropout is not supported");',
        'TORCH_CHECK((int64_t{0} < scale), "floatck::qsdpa: scale out of range");',
        'TORCH_CHECK((scale <= double{1000.0}), "floatck::qsdpa: scale out of range");')
    (tmp_path / "s.yaml").write_text(FLOATS.replace("namespace: floatck",
                                                    'namespace: floatst\nabi: stable\n'
                                                    'min_torch: "2.10"'))
    (op,) = load_library(["s.yaml"]).ops
    meta = cpp_stable.translate_meta(op)
    assert meta is not None and meta.body[0] == "if (!(dropout_p == double{0.0})) {"


@pytest.mark.e2e
@pytest.mark.slow
def test_a_check_compares_float_arguments_with_numbers_built(tmp_path):
    out = _built_and_run(
        tmp_path, {"floats.yaml": FLOATS},
        {"floatck/k.cpp": FLOATS_CPP},
        FLOATS_CHECK)
    for name in ("META", "PYTHON"):
        assert f"{name} 0.0 0.5 ok" in out
        assert f"{name} 0.1 0.5 floatck::qsdpa: dropout is not supported" in out
        assert f"{name} 0.0 0.0 floatck::qsdpa: scale out of range" in out
        assert f"{name} 0.0 2000.0 floatck::qsdpa: scale out of range" in out
