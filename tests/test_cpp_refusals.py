"""Types the C++ back end cannot bind are refused at generation with a located error, never
turned into C++ that fails later: TorchScript-only types (refused by codegen.api.cpp even when a
caller skips the loader's own check) and types the schema language and c10 accept but a custom
op kernel cannot take from Python (named dimensions, TorchBind classes, required generators,
also inside lists and tuples, QScheme, GraphModule, ...). The forms c10 does bind (nested lists,
tuples, optional list returns) are built and called by tests/test_cpp_types.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen import config, parse_schema
from codegen.api import cpp
from codegen.dest import cpp_kernels, cpp_register
from codegen.load import load_library

# (argument or return type text, what the message must say)
UNBINDABLE = [
    ("Any", "TorchScript-only"),
    ("t", "type variable 't' is TorchScript-only"),
    ("Dict(Tensor?, int)", "'Tensor?' cannot be a Dict key"),
    ("(Generator, int)", "can only bind an optional generator"),
    ("Future(Tensor)", "'Future(...)' is a TorchScript-only type"),
    ("number", "'number' is a TorchScript-only type"),
    ("complex", "'complex' is a TorchScript-only type"),
    ("Dimname", "named dimensions ('Dimname') cannot be bound"),
    ("__torch__.torch.classes.ns.Thing", "TorchBind class '__torch__.torch.classes.ns.Thing'"),
    ("Generator[][]", "can only bind an optional generator"),
    ("int??[]", "nested optional types have no C++ binding"),
    ("Generator", "can only bind an optional generator"),
    ("QScheme", "'QScheme' arguments cannot be passed to a custom op from Python"),
    ("GraphModule", "'GraphModule' is a Python-only type"),
]


@pytest.mark.parametrize("type_text, message", UNBINDABLE, ids=[t for t, _ in UNBINDABLE])
def test_argument_type_refused_at_its_span(type_text: str, message: str) -> None:
    text = f"ns::f(Tensor self, {type_text} x) -> Tensor"
    with pytest.raises(cpp.Unsupported) as info:
        cpp.signature(parse_schema(text))
    assert message in info.value.message
    span = info.value.span
    assert span is not None and text[span.start:span.end] == type_text


@pytest.mark.parametrize("ret, message", [
    ("bool[2]", "fixed-size list returns ('bool[2]') have no C++ binding"),
    ("Tensor(a!)[]", "a mutable tensor list cannot be returned"),
    ("Any", "TorchScript-only"),
])
def test_return_type_refused_at_its_span(ret: str, message: str) -> None:
    text = f"ns::f(Tensor(a!)[] self) -> {ret}"
    with pytest.raises(cpp.Unsupported) as info:
        cpp.signature(parse_schema(text))
    assert message in info.value.message
    span = info.value.span
    assert span is not None and text[span.start:span.end] == ret


def test_variadic_schema_refused() -> None:
    with pytest.raises(cpp.Unsupported, match="variadic schemas"):
        cpp.signature(parse_schema("ns::f(...) -> ..."))


def test_generators_report_located_diagnostics(tmp_path: Path) -> None:
    """Through the generators: compiler-style messages pointing into the op file, all at once,
    and no C++ emitted for the refused ops."""
    path = tmp_path / "ops.yaml"
    path.write_text("""\
namespace: rx
ops:
  - func: named(Tensor self, Dimname d) -> Tensor
    dispatch: {CompositeExplicitAutograd: named_kernel}
  - func: nested(Tensor self,
                 (int, Dimname) x) -> Tensor
  - func: fine(Tensor self) -> Tensor
    dispatch: {CompositeExplicitAutograd: fine_kernel}
""")
    lib = load_library([str(path)])
    diags = lib.diagnostics()
    project = config.default_project(Path.cwd())
    header = cpp_kernels.generate(lib, diags, project)
    registration = cpp_register.generate(lib, diags, project)
    rendered = diags.render().replace(str(path), "ops.yaml")
    assert rendered == """\
ops.yaml:3:30: error: named dimensions ('Dimname') cannot be bound by a custom op kernel (in op rx::named)
      - func: named(Tensor self, Dimname d) -> Tensor
                                 ^~~~~~~
hint: pass dimensions as 'int' or 'int[]'
ops.yaml:6:18: error: named dimensions ('Dimname') cannot be bound by a custom op kernel (in op rx::nested)
                     (int, Dimname) x) -> Tensor
                     ^~~~~~~~~~~~~~
hint: pass dimensions as 'int' or 'int[]'
2 errors generated."""
    text = "".join(header.values()) + "".join(registration.values())
    # Each op name has a header of its own, which comments and #includes name; no code does.
    code = "\n".join(line for line in text.splitlines()
                     if not line.lstrip().startswith(("//", "#include")))
    assert "fine_kernel" in code and "named_kernel" not in code and "nested" not in code


def test_loader_refuses_torchscript_types_first(tmp_path: Path) -> None:
    """TorchScript-only types never reach the generators: the loader reports them, located."""
    from codegen.diagnostics import UserError

    path = tmp_path / "ops.yaml"
    path.write_text("namespace: rx\nops:\n  - func: f(Tensor self, Any x) -> Tensor\n")
    with pytest.raises(UserError) as info:
        load_library([str(path)])
    assert f"{path}:3:26: error: type 'Any' (argument 'x') is TorchScript-only" in str(info.value)
