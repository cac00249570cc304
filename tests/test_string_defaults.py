"""String defaults holding characters torch reads raw (tab, CR, NEL, U+2028, U+2029, bidirectional
and other format characters) or octal escapes of UTF-8 bytes: accepted, and each generated target
carries the exact value (codegen/parse.py `_unquote`, codegen/model.py `quote_string`,
codegen/escape.py). torch is the oracle: the schema registered from the generated C++ string and
from the generated Python both read back as the op file's value, and every generated file keeps
one line per comment.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import torch

from codegen import config, testing
from codegen.gen import render
from codegen.load import load_library
from tests import scratch

# The value of every string default below: what the op file means, written raw in `plain`
# (YAML escapes: \t tab, \r CR, \N NEL, \L U+2028, \P U+2029) and with c10's octal escapes of its
# UTF-8 bytes in `octal`.
VALUE = "a\tb\rc\x85d\u2028e\u2029f\u202eg\ufeffh\x1bé"
PLAIN = r"a\tb\rc\Nd\Le\Pf\u202eg\ufeffh\x1bé"
OCTAL = (r"a\\tb\\015c\\302\\205d\\342\\200\\250e\\342\\200\\251f\\342\\200\\256g\\357\\273\\277"
         r"h\\033\\303\\251")

OPS = f"""\
namespace: strdef
ops:
  - func: "plain(Tensor x, str mode='{PLAIN}') -> Tensor"
    doc: "The default is '{PLAIN}'."
    dispatch: {{CPU: plain_cpu}}
    fake: like(x)
  - func: "octal(Tensor x, str mode='{OCTAL}') -> Tensor"
    dispatch: {{CPU: "tests.test_string_defaults:octal"}}
    fake: like(x)
"""

LINE_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x00]")


def octal(x, mode="a\tb\rc\x85d\u2028e\u2029f\u202eg\ufeffh\x1bé"):
    return x + len(mode)


def _op_file(tmp_path: Path) -> str:
    path = tmp_path / "ops.yaml"
    path.write_text(OPS, encoding="utf-8")
    return str(path)


def test_the_op_file_means_the_value(tmp_path):
    with scratch.in_repo():
        lib = load_library([_op_file(tmp_path)])
    assert not lib.diagnostics().items, lib.diagnostics().render()
    for op in lib.ops:
        assert op.schema.arguments[1].default.value == VALUE
        canonical = str(op.schema)
        assert canonical.isprintable(), canonical
        assert torch._C.parse_schema(canonical).arguments[1].default_value == VALUE


def test_every_generated_file_keeps_one_line_per_comment(tmp_path, monkeypatch):
    path = _op_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    lib = load_library([path])
    diags = lib.diagnostics()
    files = dict(render(lib, diags, config.default_project(Path.cwd())).files)
    assert not diags.has_errors, diags.render()
    assert any(rel.endswith(".h") for rel in files) and any(rel.endswith(".pyi") for rel in files)
    for rel, text in files.items():
        assert not LINE_BREAKS.search(text), rel
        if rel.endswith((".py", ".pyi")):
            ast.parse(text, filename=rel)
        for line in text.split("\n"):
            if line.lstrip().startswith(("//", "#")) and "mode=" in line:
                # The canonical schema in a comment: printable, as `list` prints it.
                assert line.isprintable(), (rel, line)
    # Python: the stub's and the fake kernel's defaults are the value; the stub's docstring
    # holds the canonical schema, exactly.
    for rel in ("generated/runtime/ops.pyi", "generated/runtime/_reg_strdef.py"):
        tree = ast.parse(files[rel])
        functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                     and f.args.args and f.args.args[-1].arg == "mode"]
        # the stub's two ops; the fake kernels of both, and the Autograd kernel of the one with a
        # Python kernel and no derivatives
        assert len(functions) == (2 if rel.endswith(".pyi") else 3), rel
        for f in functions:
            assert ast.literal_eval(f.args.defaults[-1]) == VALUE, (rel, f.name)
            if rel.endswith(".pyi"):
                schema = next(op.schema for op in lib.ops if op.name.name == f.name)
                assert str(schema) in ast.get_docstring(f, clean=False), f.name


def _cpp_string_value(literal: str) -> str:
    """The value of a C++ string literal as the generated code writes them (octal escapes of
    UTF-8 bytes, \\" and \\\\)."""
    out = bytearray()
    for m in re.finditer(r'\\([0-7]{3}|["\\])|(.)', literal[1:-1], re.S):
        if m.group(2) is not None:
            out += m.group(2).encode()
        elif m.group(1) in ('"', "\\"):
            out += m.group(1).encode()
        else:
            out.append(int(m.group(1), 8))
    return out.decode("utf-8")


def test_the_cpp_registration_and_call_api_carry_the_value(tmp_path, monkeypatch):
    path = _op_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    lib = load_library([path])
    diags = lib.diagnostics()
    files = dict(render(lib, diags, config.default_project(Path.cwd())).files)
    register = next(t for rel, t in files.items() if re.search(r"register_\w+\.cpp$", rel))
    defs = re.findall(r'm\.def\(("(?:[^"\\]|\\.)*")', register)
    assert len(defs) == 2
    for literal in defs:
        schema = torch._C.parse_schema("strdef::" + _cpp_string_value(literal))
        assert schema.arguments[1].default_value == VALUE
    header = next(t for rel, t in files.items() if rel.endswith("/plain.h"))
    (default,) = re.findall(r'c10::string_view mode = ("(?:[^"\\]|\\.)*")', header)
    assert _cpp_string_value(default) == VALUE


def test_the_registered_schema_has_the_value(tmp_path):
    """Defined from the canonical text and registered by the generated Python (its kernel's
    default checked equal to the schema's), the op's schema in torch holds the value."""
    with scratch.in_repo():
        lib = testing.load_python_library([_op_file(tmp_path)])
    try:
        for name in ("plain", "octal"):
            schema = getattr(torch.ops.strdef, name).default._schema
            assert schema.arguments[1].default_value == VALUE
        x = torch.zeros(2)
        assert torch.ops.strdef.octal(x).tolist() == [float(len(VALUE))] * 2
        reg = lib.modules["strdef"]
        assert "octal" in vars(reg)
    finally:
        lib.close()
