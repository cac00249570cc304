"""codegen.load: every key of the op file format read into the right records, and the file forms.

Error messages are pinned one per case in tests/diagnostics/ (test_diagnostics.py); here we check
what a valid file turns into, and the few errors that cannot live in a case file.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
import torch

from codegen.diagnostics import Loc, UserError
from codegen.diagnostics import WARNINGS
from codegen.load import CONVENTIONS, FILE_KEYS, OP_KEYS, load_library
from codegen.load_samples import DTYPES, FLOAT_DTYPES, OP_OUTPUT_KEYS, TENSOR_SAMPLE_KEYS
from codegen.yaml_source import MAX_FILE_BYTES
from codegen.model import (
    AUTOCAST_DTYPE,
    AutocastSpec,
    CppKernel,
    DerivativesSpec,
    DispatchKey,
    Located,
    PyRef,
    Sample,
    TensorSample,
    VmapSpec,
)
from codegen.tags import TAGS

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str, name: str = "ops.yaml") -> str:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(p)


def load_one(tmp_path: Path, text: str):
    lib = load_library([write(tmp_path, text)])
    assert len(lib.files) == 1
    return lib


def errors(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(UserError) as e:
        load_library([write(tmp_path, text)])
    return [d.message for d in e.value.diags.sorted()]


# --------------------------------------------------------------------------------------------------
# File forms


def test_plain_list_of_funcs_is_an_op_file(tmp_path):
    lib = load_one(tmp_path, """\
        - func: ex::f(Tensor self) -> Tensor
        - func: ex::f.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)
        """)
    assert [str(op.schema) for op in lib.ops] == [
        "ex::f(Tensor self) -> Tensor",
        "ex::f.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)",
    ]
    op = lib.ops[0]
    assert op.dispatch == () and op.tags == () and op.doc == "" and op.samples == ()
    assert op.fake is None and op.derivatives is None and op.autocast is None and op.vmap is None
    assert lib.files[0].namespace is None
    assert lib.namespaces == ("ex",)


def test_mapping_form_namespace_applies_to_unqualified_funcs(tmp_path):
    lib = load_one(tmp_path, """\
        namespace: ex
        ops:
          - func: f(Tensor x) -> Tensor
          - func: other::g(Tensor x) -> Tensor
        """)
    assert [str(op.schema) for op in lib.ops] == ["ex::f(Tensor x) -> Tensor",
                                                  "other::g(Tensor x) -> Tensor"]
    assert lib.files[0].namespace == "ex"
    assert lib.ops[0].namespace == "ex"


def test_empty_file_and_empty_list_declare_nothing(tmp_path):
    """Each is an op file of no ops, counted as one (`check` says "0 ops in 1 file")."""
    for name, text in [("a", ""), ("b", "[]\n"), ("c", "# only a comment\n"), ("d", "~\n")]:
        lib = load_library([write(tmp_path, text, f"{name}.yaml")])
        assert lib.ops == () and [f.path for f in lib.files] == [str(tmp_path / f"{name}.yaml")]


def test_directories_are_scanned_for_yaml_sorted(tmp_path):
    d = tmp_path / "schemas"
    d.mkdir()
    (d / "b.yaml").write_text("- func: ex::b() -> ()\n")
    (d / "a.yaml").write_text("- func: ex::a() -> ()\n")
    (d / "notes.txt").write_text("not an op file")
    (d / "sub").mkdir()
    (d / "sub" / "c.yaml").write_text("- func: ex::c() -> ()\n")
    lib = load_library([str(d)])
    assert [f.path for f in lib.files] == [str(d / "a.yaml"), str(d / "b.yaml")]
    assert [op.name.name for op in lib.ops] == ["a", "b"]


def test_a_file_named_twice_is_read_once(tmp_path):
    p = write(tmp_path, "- func: ex::a() -> ()\n")
    lib = load_library([p, str(tmp_path), p])
    assert len(lib.files) == 1 and len(lib.ops) == 1


def test_file_paths_are_kept_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "x.yaml").write_text("- func: ex::a() -> ()\n")
    lib = load_library(["schemas"])
    assert lib.files[0].path == os.path.join("schemas", "x.yaml")
    assert lib.ops[0].loc == Loc(os.path.join("schemas", "x.yaml"), 1, 9)


def test_missing_path_and_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError) as e:
        load_library([str(tmp_path / "nope.yaml"), str(tmp_path / "empty")])
    assert [d.message for d in e.value.diags.sorted()] == [
        "directory holds no op files (*.yaml)", "no such file or directory"]


def test_directory_of_yml_files_names_the_extension(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "mine.yml").write_text("- func: ex::a() -> ()\n")
    with pytest.raises(UserError) as e:
        load_library(["ops"])
    assert e.value.diags.render() == (
        "ops:1:1: error: directory holds no op files (*.yaml)\n"
        "hint: ops/mine.yml ends in .yml: op files are named *.yaml\n1 error generated.")


def test_unreadable_file(tmp_path, monkeypatch):
    import codegen.yaml_source

    p = write(tmp_path, "- func: ex::a() -> ()\n")

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(codegen.yaml_source, "open", refuse, raising=False)
    with pytest.raises(UserError) as e:
        load_library([p])
    assert [d.message for d in e.value.diags.items] == [
        "cannot read op file: Permission denied"]


def test_huge_file_is_refused_without_parsing(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_bytes(b"- func: ex::a() -> ()\n" + b"#" * MAX_FILE_BYTES)
    with pytest.raises(UserError) as e:
        load_library([str(p)])
    assert [d.message for d in e.value.diags.items] == [
        "file is larger than 4 MiB; this is not an op file"]


def test_bom_is_ignored(tmp_path):
    p = tmp_path / "bom.yaml"
    p.write_bytes("\ufeff- func: ex::a() -> ()\n".encode())
    assert [str(op.schema) for op in load_library([str(p)]).ops] == ["ex::a() -> ()"]


def test_every_error_of_every_file_is_reported(tmp_path):
    a = write(tmp_path, "- func: ex::a(Tensr x) -> ()\n- func: ex::b(int n=1.5) -> ()\n", "a.yaml")
    b = write(tmp_path, "- func: ex::c(\n- dispach: {}\n", "b.yaml")
    with pytest.raises(UserError) as e:
        load_library([a, b])
    locs = [(os.path.basename(d.loc.path), d.loc.line) for d in e.value.diags.sorted()]
    assert locs == [("a.yaml", 1), ("a.yaml", 2), ("b.yaml", 1), ("b.yaml", 2), ("b.yaml", 2)]


# --------------------------------------------------------------------------------------------------
# Keys


def test_op_keys_are_the_documented_ones():
    fmt = (ROOT / "docs" / "FORMAT.md").read_text()
    for key in OP_KEYS:
        assert f"| `{key}` |" in fmt


def test_func_records_its_location_and_text(tmp_path):
    lib = load_one(tmp_path, """\
        namespace: ex
        ops:
          - func: "f(Tensor x) -> Tensor"
        """)
    op = lib.ops[0]
    assert op.loc.line == 3 and op.loc.col == 11
    assert isinstance(op.func, Located) and op.func.text == "f(Tensor x) -> Tensor"
    # offsets into the schema text map to the file: `x` is at offset 9, one past the quote.
    assert op.func.at(9) == Loc(op.loc.path, 3, 21)


def test_folded_func_maps_offsets_across_lines(tmp_path):
    lib = load_one(tmp_path, """\
        - func: >-
            ex::f(Tensor x,
                  int n) -> Tensor
        """)
    op = lib.ops[0]
    assert str(op.schema) == "ex::f(Tensor x, int n) -> Tensor"
    n = op.func.text.index("n)")
    assert op.func.at(n) == Loc(op.loc.path, 3, 15)


def test_doc(tmp_path):
    lib = load_one(tmp_path, """\
        - func: ex::f() -> ()
          doc: |
            Does f.
            Twice.
        """)
    assert lib.ops[0].doc == "Does f.\nTwice.\n"


def test_tags_list_and_single(tmp_path):
    lib = load_one(tmp_path, """\
        - func: ex::f(Tensor x) -> Tensor
          tags: [pointwise, pt2_compliant_tag]
        - func: ex::g(Tensor x) -> Tensor
          tags: core
        """)
    assert lib.ops[0].tags == ("pointwise", "pt2_compliant_tag")
    assert lib.ops[1].tags == ("core",)


def test_tags_match_torch():
    torch = pytest.importorskip("torch")
    assert TAGS == frozenset(torch.Tag.__members__)


def test_dispatch_cpp_and_python_kernels(tmp_path):
    lib = load_one(tmp_path, """\
        - func: ex::f(Tensor x) -> Tensor
          dispatch:
            CPU: f_cpu
            CUDA: other::impl::f_cuda
            Meta: "pkg.meta:f_meta"
        - func: ex::g(Tensor x) -> Tensor
          dispatch:
            CompositeImplicitAutograd: pkg.mod:Class.g
        - func: ex::h(Tensor x) -> Tensor
          dispatch:
            CPU, CUDA: h_kernel
            CompositeExplicitAutograd: h_any
        """)
    f, g, h = lib.ops
    assert f.dispatch == (
        (DispatchKey.CPU, CppKernel("f_cpu", f.loc)),
        (DispatchKey.CUDA, CppKernel("other::impl::f_cuda", f.loc)),
        (DispatchKey.Meta, PyRef("pkg.meta", "f_meta", f.loc)),
    )
    assert f.kernel(DispatchKey.CPU).qualified("ex") == "ex::f_cpu"
    assert f.kernel(DispatchKey.CUDA).qualified("ex") == "other::impl::f_cuda"
    assert f.kernel(DispatchKey.CPU).loc == Loc(f.path, 3, 10, 5)
    assert g.kernel(DispatchKey.CompositeImplicitAutograd) == PyRef("pkg.mod", "Class.g", g.loc)
    assert [k for k, _ in h.dispatch] == [DispatchKey.CPU, DispatchKey.CUDA,
                                          DispatchKey.CompositeExplicitAutograd]
    assert h.kernel(DispatchKey.CUDA).name == "h_kernel"


def test_fake_python_function(tmp_path):
    lib = load_one(tmp_path, """\
        - func: ex::f(Tensor x) -> Tensor
          fake: pkg.fakes:f_fake
        """)
    assert lib.ops[0].fake == PyRef("pkg.fakes", "f_fake", lib.ops[0].loc)
    assert lib.ops[0].fake.loc.line == 2


def test_fake_rule_goes_to_the_shape_language(tmp_path):
    from codegen.shape import FakeRule

    lib = load_one(tmp_path, """\
        - func: ex::f(Tensor x, Tensor y) -> Tensor
          fake: broadcast(x, y)
        """)
    assert isinstance(lib.ops[0].fake, FakeRule)


def test_fake_rule_errors_point_into_the_rule(tmp_path):
    p = write(tmp_path, """\
        - func: ex::f(Tensor x) -> Tensor
          fake: like(y)
        """)
    with pytest.raises(UserError) as e:
        load_library([p])
    (d,) = e.value.diags.sorted()
    assert (d.loc.line, d.loc.col) == (2, 14)


def test_derivatives(tmp_path):
    from codegen.formulas import Derivatives

    lib = load_one(tmp_path, """\
        - func: ex::f(Tensor x, Tensor y, Tensor idx) -> Tensor
          derivatives:
            x: grad * y
            y: grad * x
            idx: non_differentiable
            output_differentiability: [true]
        - func: ex::g(Tensor a, Tensor b) -> Tensor
          derivatives:
            a, b: (grad, grad)
        """)
    assert isinstance(lib.ops[0].derivatives, Derivatives)
    assert isinstance(lib.ops[1].derivatives, Derivatives)


def test_derivatives_spec_reaches_the_formula_parser(tmp_path, monkeypatch):
    import codegen.formulas

    seen = []

    def fake_parse(spec, schema, diags):
        seen.append(spec)
        return "parsed"

    monkeypatch.setattr(codegen.formulas, "parse_derivatives", fake_parse)
    lib = load_one(tmp_path, """\
        - func: ex::g(Tensor a, Tensor b) -> Tensor
          derivatives:
            "a,  b": (grad, grad)
            output_differentiability: [false]
        """)
    assert lib.ops[0].derivatives == "parsed"
    (spec,) = seen
    assert isinstance(spec, DerivativesSpec)
    assert spec.output_differentiability == (False,)
    ((names, formula),) = spec.formulas
    assert names == ("a", "b") and formula.text == "(grad, grad)"
    assert formula.at(1) == Loc(formula.loc.path, 3, 15)


def test_autocast(tmp_path):
    lib = load_one(tmp_path, """\
        - func: ex::f(Tensor x) -> Tensor
          autocast: {device_type: cuda, cast_inputs: float16}
        - func: ex::g(Tensor x) -> Tensor
          autocast: {device_type: cpu, cast_inputs: torch.bfloat16}
        - func: ex::h(Tensor x) -> Tensor
          autocast: {device_type: cpu, cast_inputs: autocast_dtype}
        """)
    assert lib.ops[0].autocast == AutocastSpec("cuda", "float16", lib.ops[0].loc)
    assert lib.ops[1].autocast == AutocastSpec("cpu", "bfloat16", lib.ops[1].loc)
    assert lib.ops[2].autocast == AutocastSpec("cpu", AUTOCAST_DTYPE, lib.ops[2].loc)


def test_vmap(tmp_path):
    lib = load_one(tmp_path, """\
        - func: ex::f(Tensor x) -> Tensor
          vmap: pointwise
        - func: ex::g(Tensor x) -> Tensor
          vmap: leading
        - func: ex::h(Tensor x) -> Tensor
          vmap: pkg.batching:h_rule
        """)
    f, g, h = lib.ops
    assert f.vmap == VmapSpec("pointwise", f.loc)
    assert g.vmap == VmapSpec("leading", g.loc)
    assert h.vmap == VmapSpec(PyRef("pkg.batching", "h_rule", h.loc), h.loc)


# --------------------------------------------------------------------------------------------------
# Samples


def samples_of(tmp_path, func: str, samples: str):
    lib = load_one(tmp_path, f"- func: {func}\n  samples:\n" + textwrap.indent(
        textwrap.dedent(samples), "    "))
    return lib.ops[0].samples


def test_samples_list_in_schema_order_with_defaults_left_out(tmp_path):
    (s,) = samples_of(tmp_path, "ex::f(Tensor x, Tensor y, *, float alpha=1) -> Tensor", """\
        - {y: {shape: [3]}, x: {shape: [2, 3], requires_grad: true}}
        """)
    assert s == Sample((("x", TensorSample((2, 3), requires_grad=True)),
                        ("y", TensorSample((3,)))), s.loc)
    assert s.name is None and s.loc.line == 3


def test_samples_mapping_gives_names(tmp_path):
    a, b = samples_of(tmp_path, "ex::f(Tensor x) -> Tensor", """\
        small: {x: {shape: []}}
        big: {x: {shape: [1024, 1024], dtype: float64, low: -1, high: 1.5}}
        """)
    assert a.name == "small" and a.args == (("x", TensorSample(())),)
    assert b.name == "big" and b.args == (("x", TensorSample((1024, 1024), "float64", None,
                                                              -1.0, 1.5)),)


def test_a_sample_may_be_named_after_an_argument(tmp_path):
    """A mapping key that names an argument is a sample's name when its value is a sample (the
    keys of its value are arguments); only a key holding an argument's value is one sample left
    out of its list (tests/diagnostics/samples_one_sample_not_in_list)."""
    a, b = samples_of(tmp_path, "ex::f(Tensor x, int n=1) -> Tensor", """\
        x: {x: {shape: [2]}, n: 2}
        n: {x: {shape: [3]}}
        """)
    assert a.name == "x" and a.args == (("x", TensorSample((2,))), ("n", 2))
    assert b.name == "n" and b.args == (("x", TensorSample((3,))),)


def test_tensor_values_and_dtype_inference(tmp_path):
    (s,) = samples_of(tmp_path, "ex::f(Tensor a, Tensor b, Tensor c, Tensor d) -> Tensor", """\
        - a: {values: [[1, 2], [3, 4]]}
          b: {values: [1.5, 2]}
          c: {values: [true, false], dtype: bool}
          d: {values: 3, dtype: int32}
        """)
    a, b, c, d = (v for _, v in s.args)
    assert a == TensorSample((2, 2), "int64", values=((1, 2), (3, 4)))
    assert b == TensorSample((2,), "float32", values=(1.5, 2))
    assert c == TensorSample((2,), "bool", values=(True, False))
    assert d == TensorSample((), "int32", values=3)


def test_values_default_to_torch_tensors_dtype(tmp_path):
    """Without `dtype`, `values` take the dtype torch.tensor gives them: a mask written as
    booleans is a bool tensor (it was float32), an empty list float32 (it was int64)."""
    (s,) = samples_of(tmp_path, "ex::f(Tensor a, Tensor b, Tensor c, Tensor d) -> Tensor", """\
        - a: {values: [[true, false], [false, true]]}
          b: {values: [true, 2]}
          c: {values: []}
          d: {values: [true, 2.5]}
        """)
    got = [v.dtype for _, v in s.args]
    assert got == ["bool", "int64", "float32", "float32"]
    assert got == [str(torch.tensor(v.values).dtype).removeprefix("torch.") for _, v in s.args]


def test_scalar_and_list_sample_values(tmp_path):
    (s,) = samples_of(
        tmp_path,
        "ex::f(int n, SymInt m, float f, bool b, Scalar s, str name, int[] dims, int[2] k, "
        "float[] w, ScalarType dt, Device dev, Layout lay, MemoryFormat mf, int? o, "
        "Tensor? t, Tensor[] ts, Tensor?[] ots) -> ()",
        """\
        - {n: -3, m: 4, f: 1, b: false, s: 2.5, name: hi, dims: [0, -1], k: 3, w: [1, 2.5],
           dt: float16, dev: "cuda:1", lay: strided, mf: channels_last, o: null, t: null,
           ts: [{shape: [1]}, {shape: [2]}], ots: [null, {shape: [1]}]}
        """)
    assert dict(s.args) == {
        "n": -3, "m": 4, "f": 1.0, "b": False, "s": 2.5, "name": "hi", "dims": (0, -1),
        "k": (3, 3), "w": (1.0, 2.5), "dt": "float16", "dev": "cuda:1", "lay": "strided",
        "mf": "channels_last", "o": None, "t": None,
        "ts": (TensorSample((1,)), TensorSample((2,))), "ots": (None, TensorSample((1,))),
    }
    assert isinstance(dict(s.args)["f"], float)


def test_dtype_lists_are_torch_dtypes():
    torch = pytest.importorskip("torch")
    for name in DTYPES:
        assert isinstance(getattr(torch, name), torch.dtype), name
    for name in FLOAT_DTYPES:
        assert getattr(torch, name).is_floating_point, name


# --------------------------------------------------------------------------------------------------
# The JSON Schema for editors


def json_schema():
    return json.loads((ROOT / "codegen" / "opfile.schema.json").read_text())


def test_json_schema_matches_the_loader():
    s = json_schema()
    op = s["$defs"]["op"]
    assert set(op["properties"]) == set(OP_KEYS)
    assert op["additionalProperties"] is False and op["required"] == ["func"]
    assert set(s["$defs"]["tag"]["enum"]) == TAGS
    assert set(op["properties"]["dispatch"]["properties"]) == {k.value for k in DispatchKey}
    tensor = s["$defs"]["tensor"]
    assert set(tensor["properties"]) == set(TENSOR_SAMPLE_KEYS)
    assert set(s["$defs"]["opOutput"]["properties"]) == set(OP_OUTPUT_KEYS)
    assert set(tensor["properties"]["dtype"]["enum"]) == DTYPES | {"torch." + d for d in DTYPES}
    assert set(op["properties"]["autocast"]["properties"]["cast_inputs"]["enum"]) == \
        FLOAT_DTYPES | {AUTOCAST_DTYPE}
    assert set(s["oneOf"][1]["properties"]) == set(FILE_KEYS)
    assert set(s["$defs"]["warning"]["enum"]) == set(WARNINGS)
    assert s["oneOf"][1]["properties"]["conventions"]["enum"] == list(CONVENTIONS)


def test_json_schema_accepts_valid_files_and_rejects_unknown_keys(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    validator = jsonschema.Draft202012Validator(json_schema())
    jsonschema.Draft202012Validator.check_schema(json_schema())
    good = yaml.safe_load(textwrap.dedent("""\
        namespace: ex
        ops:
          - func: f(Tensor x, Tensor y) -> Tensor
            doc: adds
            tags: [pointwise]
            dispatch: {CPU: f_cpu, "CPU, CUDA": f_any, Meta: "pkg.m:f"}
            fake: broadcast(x, y)
            derivatives: {x: grad, "y": grad, output_differentiability: [true]}
            samples:
              - {x: {shape: [2]}, y: {values: [1, 2], dtype: int64}}
            autocast: {device_type: cuda, cast_inputs: float16}
            vmap: pointwise
        """))
    assert list(validator.iter_errors(good)) == []
    packed = yaml.safe_load(textwrap.dedent("""\
        - func: ex::linear(Tensor x, Tensor packed) -> Tensor
          samples:
            - {x: {shape: [2, 4]}, packed: {output_of: pack, args: {w: {shape: [3, 4]}}, output: 0}}
        - func: ex::pack(Tensor w) -> Tensor
        """))
    assert list(validator.iter_errors(packed)) == []
    assert list(validator.iter_errors([{"func": "ex::f() -> ()"}])) == []
    for bad in ([{"func": "ex::f() -> ()", "dispach": {}}],
                [{"doc": "no func"}],
                {"namespace": "ex"},
                [{"func": "f", "tags": ["pointwis"]}],
                [{"func": "f", "dispatch": {"CPUX": "k"}}],
                [{"func": "f", "samples": [{"x": {"shape": [1], "values": [1]}}]}],
                [{"func": "f", "vmap": "sideways"}]):
        assert list(validator.iter_errors(bad)), bad


# --------------------------------------------------------------------------------------------------
# Reading YAML


def test_yaml_1_1_scalars_and_no_timestamps(tmp_path):
    lib = load_one(tmp_path, """\
        - func: ex::f(bool a, bool b, str c, int d, float e) -> ()
          samples:
            - {a: yes, b: Off, c: 2024-01-01, d: 0x10, e: 1_000.5}
        """)
    assert dict(lib.ops[0].samples[0].args) == {"a": True, "b": False, "c": "2024-01-01",
                                                "d": 16, "e": 1000.5}


def test_alias_bomb_is_refused_quickly(tmp_path):
    import time

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 30):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    p = write(tmp_path, "\n".join(lines) + "\n")
    t = time.perf_counter()
    with pytest.raises(UserError) as e:
        load_library([p])
    assert time.perf_counter() - t < 2.0
    messages = {d.message.split(" (")[0] for d in e.value.diags.items}
    assert messages == {"YAML anchors are not allowed in op files",
                        "YAML aliases are not allowed in op files",
                        "too many errors in this file; stopping after 50"}


def test_error_limit_per_file(tmp_path):
    import time

    p = tmp_path / "ops.yaml"
    p.write_text("[" + "x, " * 1_000_000 + "x]\n")
    t = time.perf_counter()
    with pytest.raises(UserError) as e:
        load_library([str(p)])
    assert time.perf_counter() - t < 2.0
    items = e.value.diags.items
    assert len(items) == 51
    assert items[-1].message == "too many errors in this file; stopping after 50"
    assert len(e.value.diags.render()) < 30_000


def test_warnings_do_not_count_towards_the_error_limit(tmp_path):
    """A file of 60 ops with a warning each (torch's own native_functions.yaml has more) and one
    error reports that error, not "too many errors"."""
    ops = "".join(f"  - func: n{i}(Tensor x) -> int\n" for i in range(60))
    p = tmp_path / "ops.yaml"
    p.write_text(f"namespace: ex\nops:\n{ops}  - func: bad(Tensr x) -> Tensor\n")
    with pytest.raises(UserError) as e:
        load_library([str(p)])
    items = e.value.diags.items
    assert [d.severity for d in items].count("warning") == 60
    assert [d.message for d in items if d.severity == "error"] == [
        "unknown type 'Tensr' for argument 'x'"]


def test_entries_wait_for_a_late_namespace(tmp_path):
    lib = load_one(tmp_path, """\
        ops:
          - func: f(Tensor x) -> Tensor
          - func: g(Tensor x) -> Tensor
        namespace: ex
        """)
    assert [str(op.name) for op in lib.ops] == ["ex::f", "ex::g"]


def test_entries_before_a_yaml_error_are_still_checked(tmp_path):
    assert errors(tmp_path, """\
        - func: ex::f(Tensr x) -> Tensor
        - func: ex::g(Tensor x) -> Tensor
          doc: [unclosed
        """) == ["unknown type 'Tensr' for argument 'x'",
                 "invalid YAML: did not find expected ',' or ']'"]


@pytest.mark.parametrize("depth", [33, 100, 100_000])
def test_deep_nesting_is_refused_without_crashing(tmp_path, depth):
    p = write(tmp_path, "[" * depth + "]" * depth + "\n")
    with pytest.raises(UserError) as e:
        load_library([p])
    (d,) = e.value.diags.items
    assert d.message == "YAML nested more than 32 levels deep"
    assert (d.loc.line, d.loc.col) == (1, 33)


def test_nesting_at_the_limit_is_fine(tmp_path):
    # list of ops > op > samples > sample > tensor sample > 27 levels of values = 32
    values = "[" * 27 + "1" + "]" * 27
    lib = load_one(tmp_path, f"""\
        - func: ex::f(Tensor x) -> ()
          samples: [{{x: {{values: {values}}}}}]
        """)
    assert lib.ops[0].samples[0].args[0][1].shape == (1,) * 27


@pytest.mark.parametrize("fake, samples, warned", [
    # the FBGEMM case: offsets before values (tests/diagnostics/warning_empty_dtype.yaml)
    ("empty([n])", "{n: 2, idx: {shape: [3], dtype: int64}, v: {shape: [5]}}", True),
    # the dtype is given, either one
    ("empty([n], dtype=v.dtype)", "{n: 2, idx: {shape: [3], dtype: int64}, v: {shape: [5]}}",
     False),
    ("empty([n], dtype=idx.dtype)", "{n: 2, idx: {shape: [3], dtype: int64}, v: {shape: [5]}}",
     False),
    # every Tensor is an integer one: the first one's dtype may well be right
    ("empty([n])", "{n: 2, idx: {shape: [3], dtype: int64}, v: {shape: [5], dtype: int32}}",
     False),
    # the first Tensor is the floating one
    ("empty([n])", "{n: 2, idx: {shape: [3]}, v: {shape: [5], dtype: int64}}", False),
    # silenced for the op
    ("empty([n])", "{n: 2, idx: {shape: [3], dtype: bool}, v: {shape: [5]}}", False),
])
def test_empty_takes_an_integer_first_tensors_dtype(tmp_path, fake, samples, warned):
    silenced = "bool" in samples
    lib = load_one(tmp_path, f"""\
        - func: ex::f(SymInt n, Tensor idx, Tensor v) -> Tensor
          fake: {fake}
          samples:
            - {samples}
          suppress: [{'empty-dtype' if silenced else ''}]
        """)
    found = [d.message for d in lib.diagnostics().items if d.severity == "warning"]
    assert found == ([
        "empty() takes its dtype from 'idx', the op's first Tensor argument, which the sample "
        "at line 4 gives as int64 beside float32 'v'"] if warned else [])


def test_empty_dtype_is_quiet_where_the_rule_chose_the_values_dtype(tmp_path):
    """torch_sparse's relabel_one_hop returns index tensors and the values' slice: the rule gives
    the values' output `dtype=value.dtype`, so its other empty() outputs keep the indices' dtype
    on purpose (each was warned about)."""
    lib = load_one(tmp_path, """\
        - func: ex::f(Tensor idx, Tensor? value) -> (Tensor, Tensor?)
          fake: "k = dynamic(); (empty([k]), empty([k], dtype=value.dtype) if value is not None else None)"
          samples:
            - {idx: {shape: [3], dtype: int64}, value: {shape: [5]}}
        """)
    assert [d.message for d in lib.diagnostics().items if d.severity == "warning"] == []
