"""Schemas torch accepts that torchgen's conventions refuse: accepted (with warnings where a generated
extra is lost), refused only under `conventions: aten`; `check` passes exactly what `generate` can
generate; the enum numbers torch stores are spelled right; an op whose schema has the `inplace` or
`out` shape gets the tag and works under torch.compile.

The C++ side of each new form is compiled, registered and called by tests/test_cpp_types.py.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from codegen import config, enums
from codegen.__main__ import _check_python_side
from codegen.diagnostics import UserError
from codegen.gen import render
from codegen.load import load_library
from codegen.parse import parse_schema
from codegen.tags import shape_tag
from tests import scratch

torch = pytest.importorskip("torch")

# Schema styles from public op libraries that torchgen's rules refused. Each is copied as its
# library registers it (namespace aside); the comment names the repository and file.
REAL_WORLD = [
    # pytorch/extension-cpp extension_cpp/csrc/muladd.cpp (the official tutorial): `_out` name.
    "myadd_out(Tensor a, Tensor b, Tensor(a!) out) -> ()",
    # vllm-project/vllm csrc/ops.h: register_graph_buffers binds
    # `const std::vector<std::vector<int64_t>>&`, which c10 infers as int[][].
    "register_graph_buffers(int fa, int[][] handles, int[][] offsets) -> ()",
    # vllm-project/vllm csrc/torch_bindings.cpp: a tuple-typed optional argument.
    "static_scaled_fp8_quant(Tensor(a!) result, Tensor input, Tensor scale, "
    "(int, int)? group_shape=None) -> ()",
    # pytorch/torchcodec src/torchcodec/_core/custom_ops.cpp (_add_video_stream, shortened).
    "_add_video_stream(Tensor(a!) decoder, *, int? width=None, int? height=None, "
    "(Tensor, Tensor, Tensor)? custom_frame_mappings=None, str? color_conversion_library=None) "
    "-> ()",
    # pyg-team/pyg-lib pyg_lib/csrc/sampler/neighbor.cpp: a list of string triples (the Dict
    # arguments of hetero_neighbor_sample left out: Dict is not bound yet).
    "hetero_edge_types(str[] node_types, (str, str, str)[] edge_types) -> int",
    # Ascend's npu::swiglu_group_quant: an enum default as torch stores it.
    "swiglu_group_quant(Tensor x, Tensor? topk_weight, Tensor? group_index, "
    "ScalarType dst_type=39, int quant_mode=1, int group_size=128) "
    "-> (Tensor y, Tensor scale, Tensor y_origin)",
    # pytorch/audio torchaudio/csrc/rnnt/compute.cpp style: an optional among several returns.
    "rnnt_loss(Tensor logits, Tensor targets, Tensor src_lengths, Tensor tgt_lengths, int blank, "
    "float clamp, bool fused_log_smax=True) -> (Tensor, Tensor?)",
    # Mutating ops that return what they mutate without torchgen's in-place/out= shape (FBGEMM,
    # flash-attention 3 write into a positional output and return it).
    "scale_into(Tensor a, Tensor(a!) out) -> Tensor(a!)",
    "fill(Tensor(a!) x, float value) -> Tensor(a!)",
    "step_(Tensor(a!) self) -> (Tensor(a!), Tensor)",
    "o(Tensor a, *, Tensor(a!) out, int n=1) -> Tensor(a!)",
    # Optional list returns and nested string lists.
    "maybe_chunks(Tensor a, str[][] groups) -> Tensor[]?",
    # `-> None`, as Python-first libraries write it.
    "log_stats(Tensor a) -> None",
]


def write(tmp_path: Path, funcs: list[str], header: str = "namespace: ex\nops:\n") -> str:
    p = tmp_path / "ops.yaml"
    entries = "".join(f"  - func: '{f}'\n    dispatch: {{CompositeExplicitAutograd: k}}\n"
                      for f in funcs)
    p.write_text(header + entries)
    return str(p)


@pytest.mark.parametrize("func", REAL_WORLD, ids=[f.split("(")[0] for f in REAL_WORLD])
def test_real_world_schema_passes_check_and_generate(tmp_path, func):
    torch._C.parse_schema(f"ex::{func}")  # torch takes it
    lib = load_library([write(tmp_path, [func])])
    project = config.default_project(Path.cwd())
    _check_python_side(lib, project)    # `check`: warnings at most
    diags = lib.diagnostics()
    files = render(lib, diags, project)  # `generate`
    assert not diags.has_errors, diags.render()
    (op,) = lib.ops
    assert any(op.name.name in text for text in files.files.values())


def test_real_world_schemas_are_errors_under_aten_conventions(tmp_path):
    """The opt-in strict mode: the same schemas that break torchgen's rules are refused."""
    path = write(tmp_path, REAL_WORLD, "namespace: ex\nconventions: aten\nops:\n")
    with pytest.raises(UserError) as e:
        load_library([path])
    errors = [d for d in e.value.diags.sorted() if d.severity == "error"]
    assert errors and all(d.flag == "conventions: aten" for d in errors)
    refused = {e.value.diags._lines[path][d.loc.line - 1].split("'")[1].split("(")[0]
               for d in errors}
    assert refused == {"myadd_out", "scale_into", "fill", "step_", "o"}


# Schemas torch registers whose types no C++ kernel can take, next to ones it can.
AGREEMENT = REAL_WORLD + [
    "gen(Tensor a, (Generator, int) g) -> Tensor",
    "names(Tensor a, Dimname[][] d) -> Tensor",
    "ok(Tensor a, int?[] b, (Tensor, Tensor?)[] c) -> (int[][], (int, str))",
    "scalar_type_out_of_range(Tensor a, ScalarType t=46) -> Tensor",
    "default_order(Tensor a, int value=0, Tensor b) -> Tensor",    # torch refuses it too
]


@pytest.mark.parametrize("func", AGREEMENT, ids=[f.split("(")[0] for f in AGREEMENT])
def test_check_accepts_exactly_what_generate_generates(tmp_path, func):
    path = write(tmp_path, [func])
    try:
        lib = load_library([path])
        _check_python_side(lib, config.default_project(Path.cwd()))
        checked = True
    except UserError:
        checked = False
    try:
        lib = load_library([path])
        diags = lib.diagnostics()
        render(lib, diags, config.default_project(Path.cwd()))
        generated = not diags.has_errors
    except UserError:
        generated = False
    assert checked == generated


# --------------------------------------------------------------------------------------------------
# Enum numbers


def test_scalar_type_numbers_are_torchs():
    for number, value in enumerate(enums.SCALAR_TYPES):
        name = value.python.removeprefix("torch.")
        (arg,) = torch._C.parse_schema(f"f(ScalarType t={name}) -> ()").arguments
        assert arg.default_value == number, name
        assert isinstance(eval(value.python, {"torch": torch}), torch.dtype)
    for alias in ("half", "float", "double", "long", "int", "short", "chalf", "cfloat", "cdouble"):
        (arg,) = torch._C.parse_schema(f"f(ScalarType t={alias}) -> ()").arguments
        assert enums.scalar_type_number(alias) == arg.default_value


@scratch.on_pinned_torch()
def test_cpp_enumerators_are_c10s():
    from torch.utils.cpp_extension import include_paths

    include = Path(include_paths()[0])
    header = (include / "torch/headeronly/core/ScalarType.h").read_text()
    macro = header.split("#define AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(_)")[1]
    macro = macro.split("\n\n")[0]
    names = re.findall(r"_\([^,]+, (\w+)\)", macro)
    assert [v.cpp.removeprefix("at::ScalarType::") for v in enums.SCALAR_TYPES] == names
    for table, enum, file in [(enums.LAYOUTS, "Layout", "Layout.h"),
                              (enums.MEMORY_FORMATS, "MemoryFormat", "MemoryFormat.h")]:
        text = (include / "torch/headeronly/core" / file).read_text()
        body = text.split(f"enum class {enum} : int8_t {{")[1].split("}")[0]
        members = [m.strip() for m in body.split(",") if m.strip() and m.strip() != "NumOptions"]
        assert [v.cpp.removeprefix(f"at::{enum}::") for v in table] == members


def test_layout_and_memory_format_objects_exist():
    for value in enums.LAYOUTS:
        assert isinstance(eval(value.python, {"torch": torch}), torch.layout)
    for value in enums.MEMORY_FORMATS:
        assert isinstance(eval(value.python, {"torch": torch}), torch.memory_format)


def test_enum_numbers_become_named_defaults(tmp_path):
    from codegen.api import cpp, python

    schema = parse_schema("f(ScalarType a=39, Layout b=0, MemoryFormat c=2, ScalarType[] d=[6])"
                          " -> ()")
    sig = cpp.signature(schema)
    assert [b.default for b in sig.arguments[:3]] == [
        "at::ScalarType::Int3", "at::Layout::Strided", "at::MemoryFormat::ChannelsLast"]
    assert python.parameters(schema) == [
        "a=torch.int3", "b=torch.strided", "c=torch.channels_last", "d=(torch.float32,)"]


# --------------------------------------------------------------------------------------------------
# Tags from the schema's shape


@pytest.mark.parametrize("func, tag", [
    ("f_(Tensor(a!) self) -> Tensor(a!)", "inplace"),
    ("fill(Tensor(a!) x, float v) -> Tensor(a!)", "inplace"),
    ("f.out(Tensor a, *, Tensor(a!) out) -> Tensor(a!)", "out"),
    ("f.out(Tensor a, *, Tensor(a!) lo, Tensor(b!) hi) -> (Tensor(a!) lo, Tensor(b!) hi)", "out"),
    ("f(Tensor a, Tensor(a!) out) -> Tensor(a!)", None),           # not the first argument
    ("f(Tensor(a!) x) -> (Tensor(a!), Tensor)", None),             # a new value too
    ("f(Tensor(a!) x, Tensor(b!) y) -> Tensor(a!)", None),         # two mutated
    ("f(Tensor(a!) x) -> ()", None),                               # auto_functionalize as is
    ("f.out(Tensor a, *, Tensor(a!)[] out) -> ()", None),
])
def test_shape_tag(func, tag):
    assert shape_tag(parse_schema(func)) == tag


def test_user_tags_are_kept(tmp_path):
    p = tmp_path / "ops.yaml"
    p.write_text("- func: ex::fill(Tensor(a!) x, float v) -> Tensor(a!)\n  tags: [core]\n"
                 "- func: ex::g(Tensor(a!) x, float v) -> Tensor(a!)\n  tags: inplace\n")
    assert [op.tags for op in load_library([str(p)]).ops] == [("core", "inplace"), ("inplace",)]


def test_rule_ops_get_needs_contiguous_strides(tmp_path):
    """Note [Contiguous inputs for rule outputs]: a functional op whose fake is a rule gets the
    tag; not one with a Python fake, a mutating op, an op without Tensor returns, nor one whose
    op file gives a layout tag of its own; on the stable ABI before 2.12 it is implied, not
    refused as a tag."""
    p = tmp_path / "ops.yaml"
    p.write_text(textwrap.dedent("""\
        - func: ex::rule(Tensor x) -> Tensor
          fake: like(x)
        - func: ex::pyfake(Tensor x) -> Tensor
          fake: conv_kernels:fake
        - func: ex::fill_(Tensor(a!) self, float v) -> Tensor(a!)
        - func: ex::count(Tensor x) -> SymInt
          fake: x.numel()
        - func: ex::own(Tensor x) -> Tensor
          tags: [needs_fixed_stride_order]
          fake: like(x)
        - func: ex::ranked(Tensor x) -> Tensor
          tags: [core]
          fake: like(x)
        """))
    tags = {str(op.name): op.tags for op in load_library([str(p)]).ops}
    assert tags == {"ex::rule": ("needs_contiguous_strides",), "ex::pyfake": (),
                    "ex::fill_": ("inplace",), "ex::count": (),
                    "ex::own": ("needs_fixed_stride_order",),
                    "ex::ranked": ("core", "needs_contiguous_strides")}
    old = tmp_path / "stable.yaml"
    old.write_text('namespace: st\nabi: stable\nmin_torch: "2.10"\nops:\n'
                   '  - func: scale(Tensor x) -> Tensor\n    dispatch: {CPU: scale_cpu}\n'
                   '    fake: like(x)\n')
    (op,) = load_library([str(old)]).ops
    assert op.tags == ("needs_contiguous_strides",)


def test_shape_tags_make_ops_compile(tmp_path, monkeypatch):
    """With the tag added from its shape, torch.compile functionalizes an op that returns what it
    mutates, though the library has no functional variant."""
    from codegen import testing

    (tmp_path / "conv_kernels.py").write_text(textwrap.dedent("""\
        def fill(x, value):
            return x.fill_(value)

        def fill_fake(x, value):
            return x

        def into(a, *, out):
            return out.copy_(a * 2)

        def into_fake(a, *, out):
            return out
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.yaml").write_text(textwrap.dedent("""\
        namespace: convtest
        ops:
          - func: fill(Tensor(a!) x, float value) -> Tensor(a!)
            dispatch: {CompositeExplicitAutograd: "conv_kernels:fill"}
            fake: conv_kernels:fill_fake
          - func: into(Tensor a, *, Tensor(a!) out) -> Tensor(a!)
            dispatch: {CompositeExplicitAutograd: "conv_kernels:into"}
            fake: conv_kernels:into_fake
        """))
    lib = testing.load_python_library(["ops.yaml"])
    try:
        ops = torch.ops.convtest

        def f(x, y):
            return ops.fill(x, 2.0) + ops.into(torch.ones(3), out=y)

        x, y = torch.zeros(3), torch.zeros(3)
        got = torch.compile(f, backend="aot_eager", fullgraph=True)(x, y)
        assert got.tolist() == [4.0] * 3 and x.tolist() == [2.0] * 3 and y.tolist() == [2.0] * 3
    finally:
        lib.close()


def test_an_out_op_with_a_functional_variant_compiles_with_inductor(tmp_path, monkeypatch):
    """An out= op whose functional variant is declared is not tagged `out` (Note [The out tag]):
    with the tag, inductor lowers the functional op to it and fails (torch 2.13 to 2.15: a
    default left out is passed twice; 2.13: dynamic sizes fail the out buffer's layout). Both ops
    still compile."""
    from codegen import testing

    (tmp_path / "outv_kernels.py").write_text(textwrap.dedent("""\
        def shrink(x, lambd=0.5):
            return x.sign() * (x.abs() - lambd).clamp_min(0)

        def shrink_out(x, lambd=0.5, *, out):
            return out.copy_(shrink(x, lambd))
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.yaml").write_text(textwrap.dedent("""\
        namespace: outvtest
        ops:
          - func: shrink(Tensor self, float lambd=0.5) -> Tensor
            dispatch: {CompositeExplicitAutograd: "outv_kernels:shrink"}
            fake: like(self)
          - func: shrink.out(Tensor self, float lambd=0.5, *, Tensor(a!) out) -> Tensor(a!)
            dispatch: {CompositeExplicitAutograd: "outv_kernels:shrink_out"}
            fake: like(self)
          - func: only.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)
            dispatch: {CompositeExplicitAutograd: "outv_kernels:shrink_out"}
            fake: like(self)
        """))
    assert [op.tags for op in load_library(["ops.yaml"]).ops] == [
        ("needs_contiguous_strides",), (), ("out",)]
    lib = testing.load_python_library(["ops.yaml"])
    try:
        ops = torch.ops.outvtest
        x = torch.linspace(-2, 2, 12).reshape(3, 4)
        for dynamic in (False, True):
            torch._dynamo.reset()
            got = torch.compile(lambda x: ops.shrink.default(x) * 2, backend="inductor",
                                fullgraph=True, dynamic=dynamic)(x)
            torch.testing.assert_close(got, ops.shrink.default(x) * 2)
        y = torch.empty(3, 4)
        torch.compile(lambda x, y: ops.shrink.out(x, out=y), backend="inductor",
                      fullgraph=True, dynamic=True)(x, y)
        torch.testing.assert_close(y, ops.shrink.default(x))
    finally:
        lib.close()


def test_list_without_default_after_a_default_works(tmp_path, monkeypatch):
    """torch lets a list argument without a default follow one with a default (executorch's
    pytorch/executorch backends/arm/ao_ext/ops/mxfp_conv2d_op.py: `conv2d(Tensor input, ...,
    Tensor? bias=None, int[] stride, ...)`); Python cannot, so the generated functions drop the
    defaults before it, and a Python kernel need not have them."""
    from codegen import testing

    (tmp_path / "lad_kernels.py").write_text(textwrap.dedent("""\
        def conv(input, weight, bias, stride, groups=1):
            out = input * weight.sum() * stride[0] * groups
            return out if bias is None else out + bias.sum()
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.yaml").write_text(textwrap.dedent("""\
        namespace: ladtest
        ops:
          - func: conv(Tensor input, Tensor weight, Tensor? bias=None, int[] stride, int groups=1) -> Tensor
            dispatch: {CompositeExplicitAutograd: "lad_kernels:conv"}
            fake: like(input)
            derivatives:
              input: grad * weight.sum() * stride[0] * groups
              weight: non_differentiable
              bias: non_differentiable
        """))
    lib = testing.load_python_library(["ops.yaml"])
    try:
        conv = torch.ops.ladtest.conv
        x, w = torch.randn(3, dtype=torch.double, requires_grad=True), torch.randn(2)
        assert torch.allclose(conv(x, w, None, [2]), x * w.sum() * 2)
        assert torch.allclose(conv(x, w, torch.ones(2), [1], 3), x * w.sum() * 3 + 2)
        # Not test_schema: torch.fx builds an inspect.Signature from the schema and fails on
        # this order itself ("non-default argument follows default argument", torch 2.13).
        torch.library.opcheck(conv, (x, w, None, [2]), test_utils=(
            "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))
        assert torch.autograd.gradcheck(lambda t: conv(t, w.double(), None, [2]), (x,))
        # aot_eager, not inductor: inductor's lowering fails on this order the same way (hence
        # the list-after-default warning).
        compiled = torch.compile(lambda t: conv(t, w, None, [2]), backend="aot_eager",
                                 fullgraph=True)
        assert torch.allclose(compiled(x.float()), conv(x.float(), w, None, [2]))
    finally:
        lib.close()
