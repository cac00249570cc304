"""codegen.verify: schemas that must pass, the rule tables against torch, checks across files, and
torch's own native_functions.yaml (the rules are torchgen's; the corpus must pass them).

Each rejecting rule's message is pinned by a case in tests/diagnostics/.
"""

from __future__ import annotations

import collections

import sys
import textwrap
from pathlib import Path

import pytest

from codegen.diagnostics import Diagnostics, UserError
from codegen.load import load_library
from codegen.reserved import CPP_KEYWORDS
from codegen.verify import (
    DEFAULT_RULES,
    INT_ENUM_DEFAULTS,
    LAYOUT_DEFAULTS,
    MEMORY_FORMAT_DEFAULTS,
    SCALAR_TYPE_DEFAULTS,
    Rules,
    verify_library,
    verify_op,
)
from tests import scratch

ROOT = Path(__file__).resolve().parent.parent


def load_funcs(tmp_path: Path, *funcs: str):
    p = tmp_path / "ops.yaml"
    p.write_text("".join("- func: '" + f.replace("'", "''") + "'\n" for f in funcs))
    return load_library([str(p)])


def messages(tmp_path: Path, *funcs: str) -> list[str]:
    with pytest.raises(UserError) as e:
        load_funcs(tmp_path, *funcs)
    return [d.message for d in e.value.diags.sorted() if d.severity == "error"]


VALID = [
    # plain, defaults of every kind torch accepts
    "ex::f(Tensor self, int n=1, SymInt m=-1, float eps=1e-05, float g=2, bool b=False, "
    "str mode=\"valid\", Scalar alpha=1, Scalar beta=0.5, Scalar c=1j, Scalar d=True) -> Tensor",
    "ex::f.enums(Tensor self, int reduction=Mean, ScalarType dtype=long, ScalarType? d2=float32, "
    "MemoryFormat fmt=contiguous_format, Layout layout=strided, Device dev=\"cuda:0\") -> Tensor",
    "ex::f.lists(Tensor self, int[] dims=[], int[2] k=1, SymInt[3] s=[1, 2, 3], int[1] d=[-2, -1], "
    "float[] w=[1, 2.5], bool[3] mask=[True, False, True], int[]? o=None) -> Tensor",
    "ex::f.optional(Tensor self, Tensor? w=None, Generator? generator=None, int? n=None) -> Tensor",
    # keyword-only arguments may follow defaults without one
    "ex::f.kw(Tensor self, int n=1, *, int m, bool flag) -> Tensor",
    # views and in-place
    "ex::view(Tensor(a) self, int[] size) -> Tensor(a)",
    "ex::add_(Tensor(a!) self, Tensor other) -> Tensor(a!)",
    "ex::__iadd__(Tensor(a!) self, Tensor other) -> Tensor(a!)",
    "ex::zero_(Tensor(a!)[] self) -> ()",
    # out= variants
    "ex::add.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)",
    "ex::max.out(Tensor self, *, Tensor(a!) values, Tensor(b!) indices) -> "
    "(Tensor(a!) values, Tensor(b!) indices)",
    "ex::split.out(Tensor self, *, Tensor(a!)[] out) -> ()",
    "ex::g.out(Tensor self, *, Tensor(a!) out, Tensor(b!) _scratch_buf) -> Tensor(a!)",
    # mutating positional arguments, returning nothing for them
    "ex::fill(Tensor(a!) x, Scalar value) -> ()",
    "ex::update(Tensor(a!) state, Tensor x) -> Tensor",
    # factory functions take the TensorOptions group
    "ex::zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
    "bool? pin_memory=None) -> Tensor",
    # Tensor lists and optionals with annotations
    "ex::cat(Tensor(a)[] xs) -> Tensor",
    "ex::opt(Tensor(a)? x) -> Tensor(a)?",
    "ex::lst(Tensor?[] xs, Tensor[](b) ys) -> Tensor",
    # TorchBind classes are bindable
    "ex::use(__torch__.torch.classes.ex.State state, Tensor x) -> Tensor",
    # overload names may be keywords (torch has .int, .float, .from)
    "ex::to.int(Tensor self, int n) -> Tensor",
    "ex::to.from(Tensor self, Tensor src) -> Tensor",
    # names that look reserved but are not
    "ex::f.out_of_place(Tensor self) -> Tensor",
    "ex::__and__(Tensor self, Tensor other) -> Tensor",
]


@pytest.mark.parametrize("func", VALID, ids=range(len(VALID)))
def test_valid_schemas_pass(tmp_path, func):
    lib = load_funcs(tmp_path, func)
    assert len(lib.ops) == 1


def test_verify_library_reports_what_load_does(tmp_path):
    lib = load_funcs(tmp_path, *VALID)
    diags = Diagnostics()
    assert verify_library(lib, diags) is True and diags.items == []
    assert all(verify_op(op, Diagnostics(), DEFAULT_RULES) for op in lib.ops)


def test_duplicate_op_across_files(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("- func: ex::f(Tensor x) -> Tensor\n")
    b.write_text("namespace: ex\nops:\n  - func: f(Tensor y) -> Tensor\n"
                 "  - func: f.other(Tensor y) -> Tensor\n")
    with pytest.raises(UserError) as e:
        load_library([str(a), str(b)])
    (d,) = e.value.diags.items
    assert d.message == "op 'ex::f' (default overload) is defined twice"
    assert d.loc.path == str(b) and d.loc.line == 3
    assert d.hint.startswith(f"first defined at {a}:1:9")


def test_same_name_in_other_namespaces_is_fine(tmp_path):
    lib = load_funcs(tmp_path, "ex::f(Tensor x) -> Tensor", "other::f(Tensor x) -> Tensor")
    assert len(lib.ops) == 2


def test_every_error_of_an_op_is_reported(tmp_path):
    assert messages(tmp_path, "ex::f(Tensor x, int x, int lambda=1.5, Tensr y) -> Tensor") == [
        "argument 'x' is declared twice",
        "argument name 'lambda' is a Python keyword",
        "default value 1.5 does not fit type 'int' of argument 'lambda'",
        "unknown type 'Tensr' for argument 'y'",
        "argument 'y' has no default but follows 'lambda', which has one",
    ]


def test_keyword_rules_torch_breaks_can_be_excepted(tmp_path):
    func = "aten::random_.from(Tensor(a!) self, int from, int? to) -> Tensor(a!)"
    assert messages(tmp_path, func) == ["argument name 'from' is a Python keyword"]
    p = tmp_path / "ops.yaml"
    assert len(load_library([str(p)], rules=Rules.torch_corpus()).ops) == 1
    # the exception is for that op only
    p.write_text('- func: "aten::other(Tensor self, int from) -> Tensor"\n')
    with pytest.raises(UserError):
        load_library([str(p)], rules=Rules.torch_corpus())


# --------------------------------------------------------------------------------------------------
# The rule tables agree with torch's own schema parser


def torch_accepts(arg: str) -> bool:
    torch = pytest.importorskip("torch")
    try:
        torch._C.parse_schema(f"ex::f({arg}) -> ()")
    except RuntimeError:
        return False
    return True


def test_enum_defaults_are_exactly_what_torch_accepts():
    for name in SCALAR_TYPE_DEFAULTS:
        assert torch_accepts(f"ScalarType t={name}"), name
    for name in INT_ENUM_DEFAULTS:
        assert torch_accepts(f"int r={name}"), name
    for name in MEMORY_FORMAT_DEFAULTS:
        assert torch_accepts(f"MemoryFormat m={name}"), name
    for name in LAYOUT_DEFAULTS:
        assert torch_accepts(f"Layout l={name}"), name
    # ... and the nearby names we refuse, torch refuses too.
    for arg in ["int r=Sum", "MemoryFormat m=channels_last", "MemoryFormat m=preserve_format",
                "Layout l=sparse_coo", "ScalarType t=float128"]:
        assert not torch_accepts(arg), arg


@scratch.on_pinned_torch()
def test_every_torch_dtype_name_is_a_scalar_type_default():
    torch = pytest.importorskip("torch")
    names = {n for n in dir(torch) if isinstance(getattr(torch, n), torch.dtype)}
    assert names == SCALAR_TYPE_DEFAULTS


def test_cpp_keywords_are_keywords():
    # a sample of the list, against the alternative tokens that are easy to forget
    assert {"and", "or", "not", "xor", "bitand", "compl", "co_await", "requires", "char8_t"} \
        <= CPP_KEYWORDS


# --------------------------------------------------------------------------------------------------
# torch's corpus


def test_torch_native_functions_pass_with_the_torch_corpus_rules(tmp_path):
    pytest.importorskip("torchgen")
    import torch
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from bench_load import convert, torchgen_paths
    finally:
        sys.path.remove(str(ROOT / "bench"))
    out = tmp_path / "native_functions.yaml"
    n = convert(torchgen_paths()[0], str(out))
    lib = load_library([str(out)], rules=Rules.torch_corpus())
    assert len(lib.ops) == n
    pinned = torch.__version__.split("+")[0] == scratch.pinned_torch()
    if pinned:
        assert n == 2584
    # With our own rules, only the three `from` arguments and the device kernels of factory ops
    # (which BackendSelect reaches in aten, and nothing reaches in a custom op) are refused.
    with pytest.raises(UserError) as e:
        load_library([str(out)])
    errors = collections.Counter(d.message.split(" kernel of ")[0]
                                 for d in e.value.diags.sorted() if d.severity == "error")
    expected = {"argument name 'from' is a Python keyword": 3, "a CPU": 8, "a CUDA": 1,
                "a Meta": 1}
    # Another torch has other factory ops; the kinds of refusal stay.
    assert errors == expected if pinned else set(errors) == set(expected)


def test_canonical_schema_is_what_list_prints(tmp_path):
    p = tmp_path / "ops.yaml"
    p.write_text(textwrap.dedent("""\
        namespace: ex
        ops:
          - func: "f( Tensor   self,int n = 1 ,*, float eps=1e-5 )->Tensor"
        """))
    (op,) = load_library([str(p)]).ops
    assert str(op.schema) == "ex::f(Tensor self, int n=1, *, float eps=1e-05) -> Tensor"


def test_device_defaults_are_exactly_what_torch_accepts():
    """c10 reads a Device default at `m.def`, where a string it refuses aborts the process at
    import: check refuses exactly those."""
    from codegen import enums

    strings = [*enums.DEVICE_TYPES, *(f"{t}:0" for t in enums.DEVICE_TYPES), "cuda:1",
               "cuda:127", "cuda:99999999999", "cuda:01", "cuda:00",
               "cpu:0", "cpu:1", "gpu", "CPU", "Cuda", "cuda:", ":0", "cuda:-1", "cuda:0:1",
               "cuda 0", "c_uda", "", "cuða", "cuda:٠", "privateuse1"]
    for s in strings:
        assert torch_accepts(f'Device d="{s}"') == (enums.device_string_problem(s) is None), s
    # Indices past 127 torch reads as other devices (int8_t wraps); check refuses them too.
    import torch

    for s in ["cuda:128", "cuda:255", "cuda:256"]:
        assert enums.device_string_problem(s) is not None
        assert str(torch._C.parse_schema(f'f(Device d="{s}") -> ()').arguments[0].default_value) \
            != s


def test_every_scalar_type_default_has_torchs_number():
    # One table (codegen.enums) for ScalarType names: what check accepts, the generators can spell,
    # with the number torch's parser gives it (`bit` was accepted and then had no spelling).
    import torch

    from codegen import enums

    for name in sorted(SCALAR_TYPE_DEFAULTS):
        schema = torch._C.parse_schema(f"f(ScalarType t={name}) -> ()")
        assert enums.scalar_type_number(name) == schema.arguments[0].default_value, name


def test_only_augmented_assignment_dunders_are_in_place(tmp_path):
    """torchgen reads `__i<op>__` as in-place only for PEP 203's augmented assignments: under
    `conventions: aten`, `__invert__` and `__index__` are plain ops, `__ior__` is in-place."""
    p = tmp_path / "ops.yaml"
    p.write_text(textwrap.dedent("""\
        conventions: aten
        ops:
          - func: ex::__invert__(Tensor self) -> Tensor
          - func: ex::__index__(Tensor self) -> Tensor
          - func: ex::__ior__(Tensor(a!) self, Tensor other) -> Tensor(a!)
        """))
    lib = load_library([str(p)])
    assert [op.name.inplace for op in lib.ops] == [False, False, True]
    assert not lib.diagnostics().items
