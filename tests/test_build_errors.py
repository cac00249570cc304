"""Build failures about kernels are readable: a kernel defined with parameters or a return type
other than its schema's, a helper with external linkage, and a kernel named in the op file but
never defined
each fail the build with the compiler's located error followed by a note that names the op, its
schema, and the declaration the dispatcher expects (scratch libraries in temp dirs).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.build_notes import generated_header_note
from tests import scratch

pytestmark = pytest.mark.e2e

OP_FILE = """\
namespace: bad
ops:
  - func: twice(Tensor self, float factor=2.0) -> Tensor
    dispatch:
      CPU: twice_cpu
    fake: like(self)
  - func: twice_(Tensor(a!) self, float factor=2.0) -> Tensor(a!)
    dispatch:
      CPU: twice_cpu_
"""

WRONG_SIGNATURE = """\
#include <bad/bad.h>

namespace bad {

double scale(double x) { return 2 * x; }

at::Tensor twice_cpu(const at::Tensor& self, int64_t factor) {
  return self.mul(scale(static_cast<double>(factor)));
}

at::Tensor twice_cpu_(at::Tensor& self, double factor) { return self.mul_(factor); }

}  // namespace bad
"""

NO_DEFINITION = """\
// The op file names bad::twice_cpu, which nothing defines: compiling succeeds, linking fails.
#include <bad/bad.h>
"""


def build_scratch(root: Path, kernel: str):
    scratch.make_root(root, {"bad.yaml": OP_FILE}, {"bad/kernels.cpp": kernel})
    gen = scratch.generate(root)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    return scratch.build(root)


def test_wrong_kernel_signature_names_the_op(tmp_path: Path) -> None:
    proc = build_scratch(tmp_path, WRONG_SIGNATURE)
    assert proc.returncode != 0
    out = proc.stdout
    # The compiler's own located error, then our note naming the op and the expected signature.
    assert "runtime/csrc/bad/kernels.cpp:7:12: error: no previous declaration for" in out
    assert "bad::twice_cpu(const at::Tensor&, int64_t)" in out
    assert ("runtime/csrc/bad/kernels.cpp:7:12: note: 'bad::twice_cpu' is the CPU kernel of "
            "bad::twice (schemas/bad.yaml:5); for the schema\n"
            "    bad::twice(Tensor self, float factor=2.0) -> Tensor\n"
            "  the dispatcher calls it as (generated/cpp/bad/bad/twice.h:") in out
    assert "    at::Tensor twice_cpu(const at::Tensor& self, double factor);\n" in out
    assert "hint: change the definition to match, or the schema in the op file" in out
    # A helper with external linkage is reported with the fix.
    assert ("runtime/csrc/bad/kernels.cpp:5:8: note: 'bad::scale' is not a kernel named in the "
            "op files") in out
    assert "hint: make it 'static' or move it into an anonymous namespace" in out
    # Same parameters, another return type: the compiler's "ambiguating" error gets the note too.
    assert "runtime/csrc/bad/kernels.cpp:11:12: error: ambiguating new declaration of" in out
    assert ("runtime/csrc/bad/kernels.cpp:11:12: note: 'bad::twice_cpu_' is the CPU kernel of "
            "bad::twice_ (schemas/bad.yaml:9)") in out
    assert "    at::Tensor& twice_cpu_(at::Tensor& self, double factor);\n" in out


def test_undefined_kernel_names_the_op(tmp_path: Path) -> None:
    proc = build_scratch(tmp_path, NO_DEFINITION)
    assert proc.returncode != 0
    out = proc.stdout
    assert "undefined reference to `bad::twice_cpu(at::Tensor const&, double)'" in out
    assert ("note: 'bad::twice_cpu' is the CPU kernel of bad::twice (schemas/bad.yaml:5), "
            "declared in generated/cpp/bad/bad/twice.h:") in out
    assert "but defined by no kernel source; define it as\n" \
           "    at::Tensor twice_cpu(const at::Tensor& self, double factor);" in out


MISSPELLED = """\
#include <bad/bad.h>

namespace bad {

at::Tensor twise_cpu(const at::Tensor& self, double factor) { return self.mul(factor); }

at::Tensor& twice_cpu_(at::Tensor& self, double factor) { return self.mul_(factor); }

}  // namespace bad
"""


def test_a_misspelled_kernel_definition_is_told_the_kernel_it_misses(tmp_path: Path) -> None:
    """A definition whose name is one letter off the op file's kernel gets the kernel's name,
    not the advice for helpers ('make it static')."""
    out = build_scratch(tmp_path, MISSPELLED).stdout
    assert ("runtime/csrc/bad/kernels.cpp:5:12: note: 'bad::twise_cpu' is not a kernel named in "
            "the op files; 'bad::twice_cpu' is (the CPU kernel of bad::twice "
            "(schemas/bad.yaml:5)), and no kernel source defines it\n"
            "hint: did you mean 'twice_cpu'? rename the function or the kernel in the op file's "
            "`dispatch:` so that the two match\n") in out
    assert "static" not in out


def test_an_undefined_kernel_is_told_the_function_it_misses_once(tmp_path: Path) -> None:
    """Declared by the source itself (as ported projects' own headers do), the misspelled
    definition compiles; the link's undefined kernel gets a did-you-mean among the functions
    the kernel sources define, and one note however often the linker repeats the error."""
    declared = MISSPELLED.replace(
        "namespace bad {\n", "namespace bad {\n\n"
        "at::Tensor twise_cpu(const at::Tensor& self, double factor);\n", 1)
    out = build_scratch(tmp_path, declared).stdout
    assert out.count("undefined reference to `bad::twice_cpu(") >= 2
    note = ("note: 'bad::twice_cpu' is the CPU kernel of bad::twice (schemas/bad.yaml:5), "
            "declared in generated/cpp/bad/bad/twice.h:")
    assert out.count(note) == 1
    assert ("in a kernel source under runtime/csrc\n"
            "hint: did you mean 'twise_cpu' (runtime/csrc/bad/kernels.cpp:7)? rename it or the "
            "kernel in the op file's `dispatch:` so that the two match\n") in out


NO_INCLUDE = """\
// The kernels are right, but the generated header that declares them is not included.
#include <ATen/core/Tensor.h>

namespace bad {

at::Tensor twice_cpu(const at::Tensor& self, double factor) { return self.mul(factor); }

at::Tensor& twice_cpu_(at::Tensor& self, double factor) { return self.mul_(factor); }

}  // namespace bad
"""


def test_a_kernel_without_its_header_is_told_which_to_include(tmp_path: Path) -> None:
    """The definition matches the declaration: the fix is the include, not the signature."""
    proc = build_scratch(tmp_path, NO_INCLUDE)
    assert proc.returncode != 0
    out = proc.stdout
    assert "runtime/csrc/bad/kernels.cpp:6:12: error: no previous declaration for" in out
    assert ("runtime/csrc/bad/kernels.cpp:6:12: note: 'bad::twice_cpu' is the CPU kernel of "
            "bad::twice (schemas/bad.yaml:5); the definition matches its declaration in "
            "generated/cpp/bad/bad/twice.h:") in out
    assert (", but runtime/csrc/bad/kernels.cpp does not include that header\n"
            "hint: add `#include <bad/bad/twice.h>` to runtime/csrc/bad/kernels.cpp, above the "
            "definition\n") in out
    assert "hint: add `#include <bad/bad/twice_.h>` to runtime/csrc/bad/kernels.cpp" in out
    assert "change the definition to match" not in out


def test_a_header_opgen_did_not_generate_gets_the_ones_it_did(tmp_path: Path,
                                                              monkeypatch) -> None:
    """`#include <ns/ns.h>` in a library whose op files are not named after the namespace: the
    compiler's 'No such file' gets a note naming the headers there are (no build: the note reads
    the generated directory)."""
    cpp = tmp_path / "generated" / "cpp" / "bad"
    (cpp / "norm").mkdir(parents=True)
    for name in ("index.json", "norm.h", "jagged.h", "norm/rms.h"):
        (cpp / name).write_text("{}\n" if name.endswith(".json") else "#pragma once\n")
    monkeypatch.chdir(tmp_path)
    missing = "runtime/csrc/bad/k.cpp:1:10: fatal error: {}: No such file or directory"
    assert generated_header_note(missing.format("bad/bad.h"), tmp_path) == (
        "runtime/csrc/bad/k.cpp:1:10: note: <bad/bad.h> is not a header opgen generates: "
        "namespace 'bad' has <bad/jagged.h>, <bad/norm.h>; each op file's header is named after "
        "the file, each op's after the op (<bad/<op file>/<op>.h>)\n"
        "hint: include the header of the op file that declares the kernels")
    for other in ("c10/core/Scalar.h", "other/other.h", "bad.h"):
        assert generated_header_note(missing.format(other), tmp_path) is None


def test_a_leftover_namespace_directory_is_told_where_it_compiles(tmp_path: Path) -> None:
    """A library with one namespace compiles every kernel source into it: a directory left from
    a namespace whose ops are gone joins that library, and the compiler's 'No such file' for its
    generated header gets a note saying so."""
    scratch.make_root(tmp_path, {"bad.yaml": OP_FILE},
                      {"bad/kernels.cpp": WRONG_SIGNATURE.replace("int64_t factor", "double factor"),
                       "gone/k.cpp": "#include <gone/gone.h>\n"})
    assert scratch.generate(tmp_path).returncode == 0
    proc = scratch.build(tmp_path)
    assert proc.returncode != 0
    assert ("runtime/csrc/gone/k.cpp:1:10: note: <gone/gone.h> would be a header of namespace "
            "'gone', which has no ops, so opgen generates none; runtime/csrc/gone/k.cpp lies in "
            "runtime/csrc/gone/ and is compiled into namespace 'bad', the library's only one\n"
            "hint: delete runtime/csrc/gone/ if namespace 'gone' is gone, or give it ops in an op "
            "file\n") in proc.stdout, proc.stdout


def test_a_header_included_through_a_local_header_counts(tmp_path: Path) -> None:
    """A wrong signature in a file that includes the generated header through its own header
    keeps the signature note (and no include hint)."""
    scratch.make_root(tmp_path, {"bad.yaml": OP_FILE},
                      {"bad/common.h": "#pragma once\n#include <bad/bad.h>\n",
                       "bad/kernels.cpp": WRONG_SIGNATURE.replace("<bad/bad.h>", '"common.h"')})
    assert scratch.generate(tmp_path).returncode == 0
    out = scratch.build(tmp_path).stdout
    assert "hint: change the definition to match, or the schema in the op file" in out
    assert "does not include" not in out


PYTHON_MODULE = """\
#include <torch/extension.h>

#include <bad/bad.h>

namespace bad {

at::Tensor twice_cpu(const at::Tensor& self, double factor) { return self.mul(factor); }

}  // namespace bad

// PYBIND11_MODULE in a comment is not a block.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}
"""


def test_python_headers_and_module_init_get_a_note(tmp_path: Path) -> None:
    """A cpp_extension tutorial's kernel file: torch/extension.h pulls in Python.h."""
    proc = build_scratch(tmp_path, PYTHON_MODULE)
    assert proc.returncode != 0
    out = proc.stdout
    assert "fatal error: Python.h: No such file or directory" in out
    assert ("runtime/csrc/bad/kernels.cpp:1:10: note: op libraries built by opgen do not link "
            "Python, so kernel sources are compiled without Python's headers "
            "(<torch/extension.h> includes <Python.h>)\n"
            "hint: remove the #include <torch/extension.h> and the module-init block "
            "(PYBIND11_MODULE at runtime/csrc/bad/kernels.cpp:12): the generated TORCH_LIBRARY "
            "code registers the ops, and importing the package loads the library; include "
            "<torch/all.h> or the ATen headers the kernels use instead; see docs/MIGRATION.md\n"
            ) in out


def test_include_note_without_a_compiler(tmp_path: Path, monkeypatch) -> None:
    """The include note on its own: a definition that also differs from its declaration is told
    to include the header and then to fix the signature."""
    from codegen.build_notes import kernel_index, kernel_note

    scratch.make_root(tmp_path, {"bad.yaml": OP_FILE}, {"bad/kernels.cpp": NO_INCLUDE})
    assert scratch.generate(tmp_path).returncode == 0
    monkeypatch.chdir(tmp_path)
    index = kernel_index(tmp_path)
    line = ("runtime/csrc/bad/kernels.cpp:6:12: error: no previous declaration for ‘at::Tensor "
            "bad::twice_cpu(const at::Tensor&, int64_t)’ [-Werror=missing-declarations]")
    note = kernel_note(line, index, tmp_path)
    assert note.startswith("runtime/csrc/bad/kernels.cpp:6:12: note: 'bad::twice_cpu' is the CPU "
                           "kernel of bad::twice (schemas/bad.yaml:5), declared in "
                           "generated/cpp/bad/bad/twice.h:"), note
    assert note.endswith(
        ", which runtime/csrc/bad/kernels.cpp does not include; for the schema\n"
        "    bad::twice(Tensor self, float factor=2.0) -> Tensor\n"
        "  the dispatcher calls it as\n"
        "    at::Tensor twice_cpu(const at::Tensor& self, double factor);\n"
        "hint: add `#include <bad/bad/twice.h>` to runtime/csrc/bad/kernels.cpp, above the "
        "definition; then change the definition to match, or the schema in the op file"), note
    # Including the file's header (which includes the op's) is enough: the signature note.
    source = tmp_path / "runtime" / "csrc" / "bad" / "kernels.cpp"
    source.write_text("#include <bad/bad.h>\n" + NO_INCLUDE, encoding="utf-8")
    assert kernel_note(line, index, tmp_path).endswith(
        "hint: change the definition to match, or the schema in the op file")


def test_include_note_knows_gcc_names_at_types_by_their_c10_home() -> None:
    """gcc prints the header's `at::ScalarType` as `c10::ScalarType` (a using-declaration, not a
    typedef): a definition that matches was told to change (FBGEMM's
    embedding_bag_rowwise_prune, `ScalarType compressed_indices_dtype`)."""
    from codegen.build_notes import KernelInfo, same_declaration

    info = KernelInfo(
        "jag::prune_cpu", ("CPU kernel of jag::prune (defs/j.yaml:3)",),
        "jag::prune(Tensor weight, ScalarType dtype, Scalar s) -> Tensor",
        "at::Tensor prune_cpu(const at::Tensor& weight, at::ScalarType dtype, "
        "const at::Scalar& s);", "gen/cpp/jag/j/prune.h", 24, "jag")
    assert same_declaration("at::Tensor jag::prune_cpu(const at::Tensor&, c10::ScalarType, "
                            "const c10::Scalar&)", info)
    assert not same_declaration("at::Tensor jag::prune_cpu(const at::Tensor&, c10::ScalarType, "
                                "double)", info)
    assert not same_declaration("at::Tensor other::prune_cpu(const at::Tensor&, "
                                "c10::ScalarType, const c10::Scalar&)", info)


def test_index_records_what_the_registration_units_register() -> None:
    """The build refuses a hand-written registration of a generated kernel from the index's
    `registrations`, not by reading generated C++: for the example library (full and stable ABI,
    CPU, CUDA and Meta kernels, overloads), they are exactly what the rendered units register."""
    import json

    from codegen import config
    from codegen import layout as L
    from codegen.dest.ninja import impl_registrations
    from codegen.gen import render
    from codegen.load import load_library

    lib = load_library(["schemas"])
    project = config.default_project(Path.cwd())
    out = render(lib, lib.diagnostics(), project).files
    units = 0
    for ns, shards in L.shards(lib).items():
        recorded = json.loads(out[L.index_path(project, ns)])["registrations"]
        assert set(recorded) == {s.registration(project) for s in shards}
        for unit, pairs in recorded.items():
            parsed = sorted((r.name, r.key) for r in impl_registrations(out[unit]))
            assert parsed and sorted(map(tuple, pairs)) == parsed, unit
            units += 1
    assert units >= 3 and {"Meta", "CUDA", "CPU"} <= {
        key for ns in L.shards(lib) for pairs in
        json.loads(out[L.index_path(project, ns)])["registrations"].values() for _, key in pairs}


def test_notes_read_data_not_comments(tmp_path: Path, monkeypatch) -> None:
    """The build learns about kernels and stable namespaces from generated/cpp/<ns>/index.json,
    not from the prose of generated headers or the build file: with every comment stripped from
    them, it knows the same."""
    from codegen.build_notes import kernel_index, min_torch_locations, stable_namespaces

    scratch.make_root(tmp_path, {"bad.yaml": OP_FILE}, {"bad/kernels.cpp": NO_INCLUDE})
    assert scratch.generate(tmp_path).returncode == 0
    monkeypatch.chdir(tmp_path)
    before = kernel_index(tmp_path)
    assert before["bad::twice_cpu"][0].uses[0].startswith("CPU kernel of bad::twice")
    generated = tmp_path / "generated"
    for path in [*generated.rglob("*.h"), generated / "build.ninja"]:
        text = path.read_text(encoding="utf-8")
        path.write_text("\n".join("" if line.lstrip().startswith(("//", "#")) and not
                                  line.lstrip().startswith(("#include", "#pragma", "#if", "#endif",
                                                            "#define", "#else"))
                                  else line for line in text.splitlines()), encoding="utf-8")
    assert kernel_index(tmp_path) == before
    assert stable_namespaces(tmp_path) == {}
    assert min_torch_locations(tmp_path, "bad") == ["schemas/bad.yaml"]


def test_an_undefined_kernel_defined_out_of_reach_is_told_so() -> None:
    """A kernel the sources define under its own name, but out of the linker's reach (static,
    an anonymous or another namespace, other parameters), is not offered as its own near miss."""
    from codegen.build_notes import defined_functions, kernel_note

    source = ("namespace bad {\nnamespace {\n"
              "at::Tensor twice_cpu(const at::Tensor& self, double factor) {\n"
              "  if (factor) { return self; }\n  return self.mul(factor);\n}\n}  // namespace\n}\n")
    assert defined_functions(source) == [("twice_cpu", 3)]
    info = _twice_kernel()
    note = kernel_note("kernels.o: undefined reference to `bad::twice_cpu(at::Tensor const&, "
                       "double)'", {"bad::twice_cpu": [info]}, None,
                       {"twice_cpu": ["runtime/csrc/bad/kernels.cpp:3"]})
    assert note is not None
    assert note.endswith(
        "hint: runtime/csrc/bad/kernels.cpp:3 defines a function named 'twice_cpu', but not "
        "this one: check that it is in namespace 'bad', neither 'static' nor in an anonymous "
        "namespace, and has the parameters above")


def test_a_header_of_a_renamed_op_file_is_told_the_generated_ones(tmp_path: Path) -> None:
    """An op file renamed (its header is named after it) leaves kernel sources including a header
    generation no longer writes: the note after the compiler's error names those it does write
    (the one of the op file, or the op's header under its new directory)."""
    from codegen import config
    from codegen.build_notes import Notes
    from codegen.diagnostics import Diagnostics

    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    (root / "ops" / "alphans.yaml").rename(root / "ops" / "core.yaml")
    gen = scratch.run(root, "-m", "codegen", "generate")
    assert gen.returncode == 0, gen.stderr
    with config.use(config.resolve(str(root), Diagnostics())):
        notes = Notes(root)
        assert notes.after("csrc/cpu/add.cpp:1:10: fatal error: alphans/alphans.h: No such file "
                           "or directory") == (
            "csrc/cpu/add.cpp:1:10: note: <alphans/alphans.h> is not a header opgen generates: "
            "namespace 'alphans' has <alphans/core.h> (ops/core.yaml); each op file's header is "
            "named after the file, each op's after the op (<alphans/<op file>/<op>.h>)\n"
            "hint: include <alphans/core.h>")
        assert notes.after("csrc/cpu/add.cpp:2:10: fatal error: alphans/alphans/twice.h: No "
                           "such file or directory").endswith(
            "\nhint: did you mean <alphans/core/twice.h>?")
        # Headers of other libraries are not opgen's to explain.
        assert notes.after("csrc/cpu/add.cpp:3:10: fatal error: ATen/Nope.h: No such file or "
                           "directory") is None


def test_a_header_of_a_renamed_stable_op_file_is_not_called_unstable(tmp_path: Path) -> None:
    """In a stable-ABI namespace, a missing generated header is not one of torch's that the
    stable ABI leaves out: the note names the generated headers."""
    from codegen import config
    from codegen.build_notes import Notes
    from codegen.diagnostics import Diagnostics
    from tests.test_wheels import write_stable_project

    root = write_stable_project(tmp_path / "proj", "stabops", "stabns")
    (root / "ops" / "stabns.yaml").rename(root / "ops" / "core.yaml")
    assert scratch.run(root, "-m", "codegen", "generate").returncode == 0
    with config.use(config.resolve(str(root), Diagnostics())):
        note = Notes(root).after("csrc/scale.cpp:1:10: fatal error: stabns/stabns.h: No such "
                                 "file or directory")
    assert note is not None and note.startswith(
        "csrc/scale.cpp:1:10: note: <stabns/stabns.h> is not a header opgen generates"), note


def _twice_kernel():
    """What the build knows of kernel bad::twice_cpu, as the generated index records it."""
    from codegen.build_notes import KernelInfo

    return KernelInfo("bad::twice_cpu", ("CPU kernel of bad::twice (schemas/bad.yaml:5)",),
                      "bad::twice(Tensor self, float factor=2.0) -> Tensor",
                      "at::Tensor twice_cpu(const at::Tensor& self, double factor);",
                      "generated/cpp/bad/bad/twice.h", 20)


def test_a_kernel_defined_outside_its_namespace_is_told_the_namespace() -> None:
    """A kernel defined at global scope (the `namespace ns {` block forgotten) is told the
    namespace its header declares it in, not the advice for helpers ('make it static')."""
    from codegen.build_notes import kernel_note

    info = _twice_kernel()
    line = ("runtime/csrc/bad/kernels.cpp:3:12: error: no previous declaration for "
            "‘at::Tensor twice_cpu(const at::Tensor&, double)’ [-Werror=missing-declarations]")
    note = kernel_note(line, {"bad::twice_cpu": [info]}, None, {"twice_cpu": ["k.cpp:3"]})
    assert note == (
        "runtime/csrc/bad/kernels.cpp:3:12: note: 'twice_cpu' is not a kernel named in the op "
        "files; 'bad::twice_cpu' is (the CPU kernel of bad::twice (schemas/bad.yaml:5)), but "
        "this definition is at global scope\n"
        "hint: define it inside `namespace bad { ... }`, where its header declares it")
    other = kernel_note(line.replace("twice_cpu(const", "other::twice_cpu(const"),
                        {"bad::twice_cpu": [info]})
    assert other is not None and "but this definition is in namespace 'other'\n" in other
    # A helper whose name no kernel has keeps the linkage advice.
    helper = kernel_note(line.replace("twice_cpu(const", "scale(const"),
                         {"bad::twice_cpu": [info]})
    assert helper is not None and "need internal linkage" in helper


def test_a_kernel_defined_in_two_sources_is_told_where() -> None:
    """The linker's 'multiple definition' names objects; the note names the kernel's op and the
    lines of the kernel sources that define it, and a helper defined twice gets the linkage
    advice."""
    from codegen.build_notes import Notes, kernel_note

    info = _twice_kernel()
    line = ("good.cpp:(.text+0x240): multiple definition of `bad::twice_cpu(at::Tensor const&, "
            "double)'; build/obj/bad/extra.o:extra.cpp:(.text+0x0): first defined here")
    places = {"twice_cpu": ["runtime/csrc/bad/extra.cpp:5", "runtime/csrc/bad/good.cpp:58"],
              "scale": ["runtime/csrc/bad/a.cpp:3", "runtime/csrc/bad/b.cpp:4"]}
    assert kernel_note(line, {"bad::twice_cpu": [info]}, None, places) == (
        "runtime/csrc/bad/extra.cpp:5: note: 'bad::twice_cpu' is the CPU kernel of bad::twice "
        "(schemas/bad.yaml:5), and more than one kernel source defines it (functions named "
        "'twice_cpu': runtime/csrc/bad/extra.cpp:5, runtime/csrc/bad/good.cpp:58)\n"
        "hint: keep one definition; the other sources call it through its header, which "
        "declares it")
    helper = line.replace("twice_cpu(at::Tensor const&, double)", "scale(double)")
    assert kernel_note(helper, {"bad::twice_cpu": [info]}, None, places) == (
        "runtime/csrc/bad/a.cpp:3: note: 'bad::scale' is defined in more than one kernel source "
        "(functions named 'scale': runtime/csrc/bad/a.cpp:3, runtime/csrc/bad/b.cpp:4)\n"
        "hint: make each 'static' or move it into an anonymous namespace, or keep one "
        "definition and declare it in a header the others include")
    # Defined twice, but not twice in the kernel sources (in a header they include): no guess.
    assert kernel_note(helper.replace("scale(", "clamp("), {"bad::twice_cpu": [info]}, None,
                       places) is None
    # The build reads the line (it says neither 'error' nor 'undefined reference').
    notes = Notes(Path("."))
    notes.index, notes.defined = {"bad::twice_cpu": [info]}, places
    assert notes.after(line + "\n") == kernel_note(line, {"bad::twice_cpu": [info]}, None, places)


def test_a_static_kernel_is_told_to_drop_static() -> None:
    """A kernel defined 'static' after its header declared it: g++ says only that it was
    declared 'extern'; the note says which op's kernel it is and why it cannot be static, and a
    helper the same error names gets no note."""
    from codegen.build_notes import kernel_note

    info = _twice_kernel()
    line = ("runtime/csrc/bad/kernels.cpp:7:19: error: ‘at::Tensor bad::twice_cpu(const "
            "at::Tensor&, double)’ was declared ‘extern’ and later ‘static’ [-fpermissive]")
    assert kernel_note(line, {"bad::twice_cpu": [info]}) == (
        "runtime/csrc/bad/kernels.cpp:7:19: note: 'bad::twice_cpu' is the CPU kernel of "
        "bad::twice (schemas/bad.yaml:5): the generated registration calls it from another "
        "file, so it cannot be 'static'\n"
        "hint: remove 'static' (only helpers, functions that are not kernels, need it)")
    assert kernel_note(line.replace("twice_cpu(", "scale("), {"bad::twice_cpu": [info]}) is None


def test_a_kernel_in_another_namespaces_directory_is_told_so(tmp_path: Path) -> None:
    """A kernel source moved into the directory of another namespace of the library is compiled
    into that namespace's library: its kernels are undefined where the registrations link, and
    the note says where the definition went, not to check its C++ namespace (which is right)."""
    from codegen import config
    from codegen.build_notes import Notes
    from codegen.diagnostics import Diagnostics

    good = "namespace: good\nops:\n  - func: halve(Tensor x) -> Tensor\n    dispatch:\n" \
        "      CPU: halve_cpu\n    fake: like(x)\n"
    kernels = "#include <bad/bad.h>\n\nnamespace bad {\n\n" \
        "at::Tensor twice_cpu(const at::Tensor& self, double factor) { return self * factor; }\n" \
        "\n}  // namespace bad\n"
    root = scratch.make_root(tmp_path, {"bad.yaml": OP_FILE, "good.yaml": good},
                             {"good/moved.cpp": kernels})
    assert scratch.generate(root).returncode == 0
    with config.use(config.resolve(str(root), Diagnostics())):
        note = Notes(root).after("register_bad.cpp:(.text+0x8): undefined reference to "
                                 "`bad::twice_cpu(at::Tensor const&, double)'")
    assert note is not None and note.endswith(
        "\nhint: runtime/csrc/good/moved.cpp:5 defines a function named 'twice_cpu', but in a "
        "kernel source of namespace 'good' (a directory named after it), compiled into that "
        "namespace's library; move the definition to a kernel source in a directory named "
        "'bad', in namespace 'bad'"), note


def test_an_op_file_error_found_by_the_build_is_not_buried(tmp_path: Path) -> None:
    """An op file broken after `generate`: the build's regeneration fails with the located
    message alone, not under ninja's list of every generated file and the codegen command."""
    scratch.make_root(tmp_path, {"bad.yaml": OP_FILE}, {"bad/kernels.cpp": NO_DEFINITION})
    gen = scratch.generate(tmp_path)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    op_file = tmp_path / "schemas" / "bad.yaml"
    op_file.write_text(OP_FILE.replace("fake: like(self)", "fake: lik(self)"))
    proc = scratch.build(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].endswith("] CODEGEN schemas"), lines
    assert lines[1:] == [
        "schemas/bad.yaml:6:11: error: unknown function 'lik'",
        "        fake: lik(self)",
        "              ^~~",
        "hint: did you mean 'like'?",
        "1 error generated.",
    ], lines


def test_a_kernel_ignoring_an_argument_builds_without_warnings(tmp_path: Path) -> None:
    """A kernel takes every argument its schema has; one it does not read (FlashAttention's
    `sm_margin`) is no slip, so it is no warning (-Wextra would give one per argument)."""
    scratch.make_root(tmp_path, {"quiet.yaml": """\
namespace: quiet
ops:
  - func: scaled(Tensor self, float factor, int sm_margin=0, bool deterministic=False) -> Tensor
    dispatch:
      CPU: scaled_cpu
    fake: like(self)
"""}, {"quiet/scaled.cpp": """\
#include <quiet/quiet.h>

namespace quiet {

at::Tensor scaled_cpu(const at::Tensor& self, double factor, int64_t sm_margin,
                      bool deterministic) {
  return self.mul(factor);
}

}  // namespace quiet
"""})
    gen = scratch.generate(tmp_path)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    built = scratch.build(tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "warning" not in built.stdout + built.stderr, built.stdout + built.stderr
