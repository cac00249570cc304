"""The stable-ABI target (Note [ABI choice] in codegen/abi.py): the promise checked on the built
binary (no libtorch C++ symbol, no libpython), the build's per-op note for a wrong kernel
signature and its note for a non-stable include, and the loader's version logic. The stable
example's PT2 checks run in tests/test_samples.py (namespace exstable); the check-time
diagnostics are pinned in tests/diagnostics{,_py}/stable_* and abi_*.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from codegen.build_notes import stable_header_note
from codegen.diagnostics import UserError
from codegen.load import load_library
from codegen.loader import LibraryError, Where, check_library, torch_mismatch
from tests import scratch

ROOT = Path(__file__).resolve().parent.parent
STABLE_LIB = ROOT / "build" / "libexstable_ops.so"
FORBIDDEN = ("c10::", "at::", "torch::", "caffe2::")


@pytest.fixture(scope="module")
def stable_library(testing) -> Path:   # `testing` builds the example libraries
    assert STABLE_LIB.is_file()
    return STABLE_LIB


@pytest.mark.e2e
def test_stable_library_needs_only_the_stable_c_shim(stable_library: Path) -> None:
    out = subprocess.run(["nm", "-D", "--undefined-only", "-C", str(stable_library)],
                         capture_output=True, text=True, check=True).stdout
    names = [line.split(None, 1)[1] for line in out.splitlines() if line.strip()]
    assert not [n for n in names if any(n.startswith(p) or f" {p}" in n or f"<{p}" in n
                                        for p in FORBIDDEN)]
    shim = [n for n in names if n.startswith(("aoti_torch_", "torch_"))]
    assert "torch_library_impl" in shim and "aoti_torch_library_init_def" in shim
    # Beyond the shim: only the C and C++ runtimes (std::, __cxa_*, glibc), nothing of torch's.
    others = [n for n in names if n not in shim]
    assert all(not n.startswith(("aoti", "torch")) for n in others), others


@pytest.mark.e2e
def test_stable_library_links_no_libpython(stable_library: Path) -> None:
    dyn = subprocess.run(["readelf", "-d", str(stable_library)], capture_output=True, text=True,
                         check=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in dyn.splitlines() if "(NEEDED)" in line]
    assert needed and not [n for n in needed if "python" in n.lower()]
    assert not [n for n in needed if n.startswith(("libc10", "libtorch.", "libtorch_python"))]


# --------------------------------------------------------------------------------------------------
# The loader


def test_torch_mismatch_for_stable_and_full_stamps() -> None:
    assert torch_mismatch(">=2.10", "2.13.0+cpu") is None
    assert torch_mismatch(">=2.10", "2.10.0") is None
    assert torch_mismatch(">=2.10", "3.0.0") is None
    refused = torch_mismatch(">=2.14", "2.13.0+cpu")
    assert refused is not None and "stable ABI for torch 2.14 or newer" in refused
    assert "this is torch 2.13.0+cpu" in refused
    assert torch_mismatch("2.13.0+cpu", "2.13.0+cpu") is None
    assert "was built for torch 2.12.0" in torch_mismatch("2.12.0", "2.13.0")


@pytest.mark.e2e
def test_older_torch_refuses_the_stable_library(stable_library: Path, tmp_path: Path) -> None:
    """The stamp in a copy of the built library is edited to demand torch 9.99 (same length)."""
    from runtime import _manifest

    info = _manifest.NAMESPACES["exstable"]
    build = tmp_path / "build"
    build.mkdir()
    data = stable_library.read_bytes()
    stamp = b"torch=>=2.10;"
    assert data.count(stamp) == 1
    (build / info["library"]).write_bytes(data.replace(stamp, b"torch=>=9.99;"))
    at = Where(tmp_path, build, "generated/runtime", "make build", "make codegen")
    with pytest.raises(LibraryError, match=r"built on torch's stable ABI for torch 9\.99 or "
                       r"newer, but this is torch 2\.\d+"):
        check_library(at, "exstable", info, "2.13.0")
    # The same copy with the stamp intact loads on this and any newer torch.
    (build / info["library"]).write_bytes(data)
    assert check_library(at, "exstable", info, "2.13.0")
    assert check_library(at, "exstable", info, "2.20.1")
    # A stale schema is still refused first.
    stale = dict(info, schema_hash="0" * 16)
    with pytest.raises(LibraryError, match="is stale"):
        check_library(at, "exstable", stale, "2.13.0")


# --------------------------------------------------------------------------------------------------
# The build's notes

STABLE_OP_FILE = """\
namespace: sbad
abi: stable
min_torch: "2.10"
ops:
  - func: twice(Tensor self, float factor=2.0) -> Tensor
    dispatch:
      CPU: twice_cpu
    fake: like(self)
"""

WRONG_SIGNATURE = """\
#include <sbad/sbad.h>

namespace sbad {

torch::stable::Tensor twice_cpu(const torch::stable::Tensor& self, int64_t factor) {
  (void)factor;
  return self;
}

}  // namespace sbad
"""

ATEN_INCLUDE = """\
#include <sbad/sbad.h>
#include <ATen/Tensor.h>
"""


@pytest.mark.e2e
def test_wrong_stable_kernel_signature_names_the_op(tmp_path: Path) -> None:
    scratch.make_root(tmp_path, {"sbad.yaml": STABLE_OP_FILE},
                      {"sbad/kernels.cpp": WRONG_SIGNATURE})
    gen = scratch.generate(tmp_path)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    proc = scratch.build(tmp_path)
    assert proc.returncode != 0
    out = proc.stdout
    assert "runtime/csrc/sbad/kernels.cpp:5:23: error: no previous declaration for" in out
    assert ("runtime/csrc/sbad/kernels.cpp:5:23: note: 'sbad::twice_cpu' is the CPU kernel of "
            "sbad::twice (schemas/sbad.yaml:7); for the schema\n"
            "    sbad::twice(Tensor self, float factor=2.0) -> Tensor\n"
            "  the dispatcher calls it as (generated/cpp/sbad/sbad.h:") in out
    assert ("    torch::stable::Tensor twice_cpu(const torch::stable::Tensor& self, "
            "double factor);\n") in out


@pytest.mark.e2e
def test_aten_include_in_a_stable_kernel_is_refused_with_a_note(tmp_path: Path) -> None:
    scratch.make_root(tmp_path, {"sbad.yaml": STABLE_OP_FILE}, {"sbad/kernels.cpp": ATEN_INCLUDE})
    assert scratch.generate(tmp_path).returncode == 0
    proc = scratch.build(tmp_path)
    assert proc.returncode != 0
    out = proc.stdout
    assert "runtime/csrc/sbad/kernels.cpp:2:10: fatal error: ATen/Tensor.h: No such file" in out
    assert ("runtime/csrc/sbad/kernels.cpp:2:10: note: <ATen/Tensor.h> is not part of torch's "
            "stable ABI; namespace 'sbad' is built with 'abi: stable' (torch >= 2.10)") in out


NEWER_API = """\
#include <sbad/sbad.h>

#include <torch/csrc/stable/ops.h>

namespace sbad {

torch::stable::Tensor twice_cpu(const torch::stable::Tensor& self, double factor) {
  (void)factor;
  // from_blob with a deleter came with torch 2.11: hidden below min_torch 2.10.
  return torch::stable::from_blob(nullptr, {0}, {1}, self.device(), self.scalar_type(),
                                  [](void*) {});
}

}  // namespace sbad
"""

TWICE_CPU = """
namespace sbad {

torch::stable::Tensor twice_cpu(const torch::stable::Tensor& self, double factor) {
  (void)factor;
  return self;
}

}  // namespace sbad
"""
NO_INCLUDE = "#include <torch/csrc/stable/tensor.h>\n" + TWICE_CPU


@pytest.mark.e2e
def test_an_api_newer_than_min_torch_gets_a_note(tmp_path: Path) -> None:
    scratch.make_root(tmp_path, {"sbad.yaml": STABLE_OP_FILE}, {"sbad/kernels.cpp": NEWER_API})
    assert scratch.generate(tmp_path).returncode == 0
    proc = scratch.build(tmp_path)
    assert proc.returncode != 0
    out = proc.stdout
    # torch 2.13's headers, built for 2.10, offer only the older overload: the deleter meets
    # its storage_offset parameter.
    assert "runtime/csrc/sbad/kernels.cpp:11:35: error: invalid user-defined conversion" in out
    assert ("runtime/csrc/sbad/kernels.cpp:11:35: note: namespace 'sbad' targets torch >= 2.10 "
            "(min_torch, schemas/sbad.yaml:3): torch's stable headers leave out what later "
            "versions added, and a call to such an API fails like this\n"
            "hint: if the API is newer than torch 2.10, raise min_torch to the release that "
            "added it (the library then loads only on that torch and newer); otherwise fix the "
            "call\n") in out
    assert out.count("note: namespace 'sbad' targets") == 1     # once per file


@pytest.mark.e2e
def test_a_stable_kernel_without_its_header_is_told_which_to_include(tmp_path: Path) -> None:
    scratch.make_root(tmp_path, {"sbad.yaml": STABLE_OP_FILE}, {"sbad/kernels.cpp": NO_INCLUDE})
    assert scratch.generate(tmp_path).returncode == 0
    proc = scratch.build(tmp_path)
    assert proc.returncode != 0
    assert ("runtime/csrc/sbad/kernels.cpp:5:23: note: 'sbad::twice_cpu' is the CPU kernel of "
            "sbad::twice (schemas/sbad.yaml:7); the definition matches its declaration in "
            "generated/cpp/sbad/sbad.h:") in proc.stdout
    assert (", but runtime/csrc/sbad/kernels.cpp does not include that header\n"
            "hint: add `#include <sbad/sbad.h>` to runtime/csrc/sbad/kernels.cpp, above the "
            "definition\n") in proc.stdout


def test_header_note_only_for_stable_namespaces() -> None:
    line = "runtime/csrc/ns/k.cpp:3:10: fatal error: c10/core/Scalar.h: No such file or directory"
    assert "namespace 'ns'" in stable_header_note(line, {"ns": "2.10"})
    assert stable_header_note(line, {"other": "2.10"}) is None


# --------------------------------------------------------------------------------------------------
# One library, one ABI


def test_files_of_a_namespace_must_agree_on_the_abi(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("a.yaml").write_text('namespace: mix\nabi: stable\nmin_torch: "2.10"\nops:\n'
                              "  - func: f(Tensor self) -> Tensor\n")
    Path("b.yaml").write_text("namespace: mix\nops:\n  - func: g(Tensor self) -> Tensor\n")
    with pytest.raises(UserError) as e:
        load_library(["a.yaml", "b.yaml"])
    text = e.value.diags.render()
    assert text.startswith("b.yaml:1:12: error: namespace 'mix' is built on the full libtorch "
                           "API here, but on the stable ABI for torch >= 2.10 by a.yaml")


def test_a_refused_min_torch_is_not_taken_for_the_full_api(tmp_path: Path, monkeypatch) -> None:
    """A file whose `min_torch:` is refused meant some stable ABI, not the full API: the other
    files of its namespace do not disagree with it."""
    monkeypatch.chdir(tmp_path)
    Path("a.yaml").write_text('namespace: mix\nabi: stable\nmin_torch: "2.10"\nops:\n'
                              "  - func: f(Tensor self) -> Tensor\n")
    Path("b.yaml").write_text("namespace: mix\nabi: stable\nmin_torch: 2.10\nops:\n"
                              "  - func: g(Tensor self) -> Tensor\n")
    with pytest.raises(UserError) as e:
        load_library(["a.yaml", "b.yaml"])
    assert e.value.diags.render() == """\
b.yaml:3:12: error: min_torch 2.10 is a number to YAML (2.10 reads as 2.1); write the version as a string
    min_torch: 2.10
               ^~~~
hint: quote it: min_torch: "2.10"
1 error generated."""



# --------------------------------------------------------------------------------------------------
# Tags (Note [Tags the stable ABI cannot register] in codegen/tags.py)

TAGGED_OP_FILE = """\
namespace: stag
abi: stable
min_torch: "2.13"
ops:
  - func: bump_(Tensor(a!) self, float v) -> Tensor(a!)
    tags: [pointwise]
    dispatch: {CPU: bump_cpu_}
  - func: bump.out(Tensor self, float v, *, Tensor(a!) out) -> Tensor(a!)
    dispatch: {CPU: bump_out_cpu}
"""

TAGGED_KERNELS = """\
#include <stag/stag.h>

#include <torch/csrc/stable/ops.h>

namespace stag {

torch::stable::Tensor bump_cpu_(torch::stable::Tensor& self, double v) {
  torch::stable::fill_(self, v);
  return self;
}

torch::stable::Tensor bump_out_cpu(const torch::stable::Tensor& self, double v,
                                   torch::stable::Tensor& out) {
  (void)self;
  torch::stable::fill_(out, v);
  return out;
}

}  // namespace stag
"""


def test_stable_registration_leaves_out_the_tags_it_cannot_register(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """torch 2.13's stable ABI converts every tag but `inplace` and `out`: the registration
    keeps the others and leaves those two out (registering one aborted the process at import)."""
    from codegen import config
    from codegen.dest import cpp_stable
    from codegen.diagnostics import Diagnostics

    (tmp_path / "stag.yaml").write_text(TAGGED_OP_FILE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    lib = load_library(["stag.yaml"])
    assert {str(op.name): op.tags for op in lib.ops} == {
        "stag::bump_": ("pointwise", "inplace"), "stag::bump.out": ("out",)}
    diags = Diagnostics()
    out = cpp_stable.generate(lib, diags, config.default_project(tmp_path))
    assert not diags.has_errors, diags.render()
    reg = out["generated/cpp/stag/register_stag.cpp"]
    assert 'm.def("bump_(Tensor(a!) self, float v) -> Tensor(a!)",\n        {at::Tag::pointwise});' \
        in reg
    assert 'm.def("bump.out(Tensor self, float v, *, Tensor(a!) out) -> Tensor(a!)");' in reg
    assert "Tag::inplace" not in reg and "Tag::out" not in reg


@pytest.mark.e2e
def test_stable_library_with_an_in_place_op_imports(tmp_path: Path) -> None:
    scratch.make_root(tmp_path, {"stag.yaml": TAGGED_OP_FILE},
                      {"stag/kernels.cpp": TAGGED_KERNELS})
    gen = scratch.generate(tmp_path)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    proc = scratch.build(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = scratch.python(tmp_path, "import torch, runtime\n"
                         "x = torch.zeros(3)\n"
                         "torch.ops.stag.bump_(x, 2.0)\n"
                         "print(x.tolist(), list(torch.ops.stag.bump_.default.tags))")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout == "[2.0, 2.0, 2.0] [<Tag.pointwise: 16>]\n"


# --------------------------------------------------------------------------------------------------
# Stable Meta kernels of conditional and promote_types rules (Note [Stable Meta kernels])

PROMOTE_OPS = """\
namespace: spro
abi: stable
min_torch: "2.10"
ops:
  - func: pmix(Tensor self, Tensor w) -> Tensor
    dispatch: {CPU: pmix_cpu}
    fake: like(self, dtype=promote_types(self.dtype, w.dtype))
  - func: pcond(Tensor self, bool flag) -> Tensor
    dispatch: {CPU: pcond_cpu}
    fake: like(self) if flag else like(self, dtype=float64)
  - func: pdef(Tensor self, ScalarType? dtype=None) -> Tensor
    dispatch: {CPU: pdef_cpu}
    fake: like(self, dtype=dtype or float32)
  - func: pboth(Tensor self, bool flag, bool wide) -> Tensor
    dispatch: {CPU: pboth_cpu}
    fake: check(flag or not wide, "wide needs flag"); like(self, dtype=float64) if flag and wide else like(self)
"""

PROMOTE_KERNELS = """\
#include <spro/spro.h>

#include <torch/csrc/stable/ops.h>

#include <array>

namespace spro {

torch::stable::Tensor pmix_cpu(const torch::stable::Tensor& self, const torch::stable::Tensor& w) {
  std::array<StableIValue, 2> stack{torch::stable::detail::from(self.scalar_type()),
                                    torch::stable::detail::from(w.scalar_type())};
  STABLE_TORCH_ERROR_CODE_CHECK(torch_call_dispatcher("aten::promote_types", "", stack.data(),
                                                      TORCH_ABI_VERSION));
  return torch::stable::to(self, torch::stable::detail::to<torch::headeronly::ScalarType>(stack[0]));
}

torch::stable::Tensor pcond_cpu(const torch::stable::Tensor& self, bool flag) {
  return flag ? torch::stable::clone(self)
              : torch::stable::to(self, torch::headeronly::ScalarType::Double);
}

torch::stable::Tensor pdef_cpu(const torch::stable::Tensor& self,
                               std::optional<torch::headeronly::ScalarType> dtype) {
  return torch::stable::to(self, dtype.value_or(torch::headeronly::ScalarType::Float));
}

torch::stable::Tensor pboth_cpu(const torch::stable::Tensor& self, bool flag, bool wide) {
  STD_TORCH_CHECK(flag || !wide, "wide needs flag");
  return flag && wide ? torch::stable::to(self, torch::headeronly::ScalarType::Double)
                      : torch::stable::clone(self);
}

}  // namespace spro
"""


def test_conditional_and_promote_types_rules_are_stable_meta_kernels(tmp_path: Path,
                                                                     monkeypatch) -> None:
    from codegen.dest import cpp_stable

    (tmp_path / "spro.yaml").write_text(PROMOTE_OPS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    ops = {str(op.name): op for op in load_library(["spro.yaml"]).ops}
    pmix = cpp_stable.translate_meta(ops["spro::pmix"])
    assert pmix is not None and pmix.body == (
        "return torch::stable::to(torch::stable::empty_like(torch::stable::contiguous(self)), "
        "meta_promote_types(self.scalar_type(), w.scalar_type()));",)
    pcond = cpp_stable.translate_meta(ops["spro::pcond"])
    assert pcond is not None and pcond.body == (
        "return (flag ? torch::stable::empty_like(torch::stable::contiguous(self)) : "
        "torch::stable::to(torch::stable::empty_like(torch::stable::contiguous(self)), "
        "torch::headeronly::ScalarType::Double));",)
    pboth = cpp_stable.translate_meta(ops["spro::pboth"])
    assert pboth is not None and pboth.body == (
        "if (!((flag || !(wide)))) {",
        '  throw std::runtime_error("spro::pboth: wide needs flag");',
        "}",
        "return ((flag && wide) ? torch::stable::to(torch::stable::empty_like("
        "torch::stable::contiguous(self)), torch::headeronly::ScalarType::Double) : "
        "torch::stable::empty_like(torch::stable::contiguous(self)));")
    pdef = cpp_stable.translate_meta(ops["spro::pdef"])
    assert pdef is not None and pdef.body == (
        "return torch::stable::to(torch::stable::empty_like(torch::stable::contiguous(self)), "
        "dtype.value_or(torch::headeronly::ScalarType::Float));",)


@pytest.mark.e2e
def test_conditional_and_promote_types_meta_kernels_pass_opcheck(tmp_path: Path) -> None:
    scratch.make_root(tmp_path, {"spro.yaml": PROMOTE_OPS}, {"spro/kernels.cpp": PROMOTE_KERNELS})
    gen = scratch.generate(tmp_path)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    proc = scratch.build(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = scratch.python(tmp_path, """\
import torch, runtime
from torch._library.simple_registry import singleton
from torch._subclasses.fake_tensor import FakeTensorMode
ops = torch.ops.spro
for name in ("spro::pmix", "spro::pcond", "spro::pdef", "spro::pboth"):
    # A C++ Meta kernel, and no Python fake (min_torch 2.10 names no Python module).
    assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta"), name
    assert singleton.find(name).fake_impl.kernel is None, name
x = torch.randn(3, 4)
cases = [(ops.pmix, (x, torch.randn(4, dtype=torch.float64))),
         (ops.pmix, (x.to(torch.int32), torch.randn(2, dtype=torch.float16))),
         (ops.pmix, (x.to(torch.bfloat16), torch.randn(2, dtype=torch.float16))),
         (ops.pcond, (x, True)), (ops.pcond, (x, False)),
         (ops.pdef, (x.to(torch.float16), None)), (ops.pdef, (x, torch.int64)),
         (ops.pboth, (x, True, True)), (ops.pboth, (x, True, False)),
         (ops.pboth, (x, False, False))]
out = []
for f, args in cases:
    torch.library.opcheck(f, args)
    with FakeTensorMode() as mode:
        fake = f(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args])
    out.append(str(fake.dtype))
with FakeTensorMode() as mode:
    try:
        ops.pboth(mode.from_tensor(x), False, True)
    except RuntimeError as e:
        out.append(str(e))
print(out)
""")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout == ("['torch.float64', 'torch.float16', 'torch.float32', 'torch.float32', "
                          "'torch.float64', 'torch.float32', 'torch.int64', 'torch.float64', "
                          "'torch.float32', 'torch.float32', 'spro::pboth: wide needs flag']\n"), \
        run.stdout


# --------------------------------------------------------------------------------------------------
# Ops with Python kernels only: defined by their schema string, whatever TORCH_BOX can box

PYTHON_ONLY_OP_FILE = """\
namespace: spy
abi: stable
min_torch: "2.13"
ops:
  # torchaudio's rnnt_loss returns its gradients as a `Tensor?`, which TORCH_BOX cannot box.
  - func: rnnt_loss(Tensor logits, Tensor targets, int blank, float clamp) -> (Tensor, Tensor?)
    dispatch: {CPU: 'spy_kernels:rnnt_loss'}
    fake: (empty([logits.size(0)]), like(logits))
  - func: rnnt_loss_cpp(Tensor logits, Tensor targets, int blank, float clamp) -> (Tensor, Tensor?)
    dispatch: {CPU: rnnt_loss_cpu}
    fake: (empty([logits.size(0)]), like(logits))
"""


def test_a_python_kernel_op_is_defined_whatever_its_types(tmp_path: Path, monkeypatch) -> None:
    """The stable registration defines an op whose kernels are all Python with its schema alone
    (torch takes a `Tensor?` return there); an op with a C++ kernel still needs boxable types."""
    from codegen import config, gen
    from codegen.dest import cpp_stable
    from codegen.diagnostics import Diagnostics

    (tmp_path / "spy.yaml").write_text(PYTHON_ONLY_OP_FILE, encoding="utf-8")
    (tmp_path / "spy_kernels.py").write_text(
        "def rnnt_loss(logits, targets, blank, clamp):\n    return logits.sum(-1), logits\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    lib = load_library(["spy.yaml"])
    diags = Diagnostics()
    gen.check_library(lib, diags, config.default_project(tmp_path))
    assert [d.message for d in diags.items if d.severity == "error"] == [
        "'Tensor?' returns cannot be boxed by torch's stable ABI (in op spy::rnnt_loss_cpp)"]
    assert diags.items[0].loc.line == 9
    diags = Diagnostics()
    out = cpp_stable.generate(lib, diags, config.default_project(tmp_path))
    reg = out["generated/cpp/spy/register_spy.cpp"]
    assert 'm.def("rnnt_loss(Tensor logits, Tensor targets, int blank, float clamp) -> ' \
           '(Tensor, Tensor?)",' in reg
    assert "rnnt_loss_cpp(" not in reg


FULL_OP_FILE = """\
namespace: sfirst
ops:
  - func: plain(Tensor self) -> Tensor
    dispatch: {CPU: plain_cpu}
    fake: like(self)
"""
FULL_KERNEL = """\
#include <ATen/ATen.h>
#include <sfirst/sfirst.h>
namespace sfirst {
at::Tensor plain_cpu(const at::Tensor& self) { return self.clone(); }
}  // namespace sfirst
"""
STABLE_KERNEL = "#include <sbad/sbad.h>\n" + TWICE_CPU


@pytest.mark.e2e
@pytest.mark.slow
def test_a_stable_namespace_added_since_the_last_generate_builds(tmp_path: Path) -> None:
    """A stable op file added to a built project, then `build` (ninja's codegen edge generates
    it): the stable include root was written from the namespaces generated before ninja ran, so
    the new namespace's sources found no torch/csrc/stable headers until a second build."""
    scratch.make_root(tmp_path, {"sfirst.yaml": FULL_OP_FILE}, {"sfirst/k.cpp": FULL_KERNEL})
    for step in (scratch.generate, scratch.build):
        proc = step(tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    scratch.make_root(tmp_path, {"sbad.yaml": STABLE_OP_FILE}, {"sbad/k.cpp": STABLE_KERNEL})
    proc = scratch.build(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "build" / "libsbad_ops.so").is_file()
