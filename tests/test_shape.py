"""The fake-rule language (codegen/shape.py): parsing and checking into IR, and the generated fake
kernels run against real kernels.

tests/golden/py/inputs/shapes.yaml declares one op per rule feature; its kernels are the reference
functions below. Loaded in this process without any C++ (`runtime.testing.load_python_library`),
each op goes through opcheck (whose test_faketensor compares the fake kernel with the kernel on
every sample) and through torch.compile with dynamic shapes at three sizes, which fails on any
size the fake kernel specializes.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from codegen import shape as S
from codegen.diagnostics import Diagnostics, Loc
from codegen.model import Located
from codegen.parse import parse_schema
from tests import scratch

OP_FILE = "tests/golden/py/inputs/shapes.yaml"


# --------------------------------------------------------------------------------------------------
# Reference kernels of shapes.yaml


def add(self, other, *, alpha=1):
    return torch.add(self, other, alpha=alpha)


def addcmul(self, tensor1, tensor2, *, value=1):
    return torch.addcmul(self, tensor1, tensor2, value=value)


def mul_scalar(self, other):
    return torch.mul(self, other)


def biased(self, bias=None):
    return self.clone() if bias is None else self + bias


def sum_dims(self, dim=None, keepdim=False, *, dtype=None):
    return torch.sum(self, dim=dim if dim else None, keepdim=keepdim, dtype=dtype)


def amax(self, dim, keepdim=False):
    return torch.amax(self, dim, keepdim)


def tile_rows(self, times):
    return self.repeat(times, *([1] * (self.dim() - 1)))


def windows(self, size, step):
    return self.unfold(-1, size, step).contiguous()


def grow(self, n):
    out = self.new_zeros((max(self.size(0), n), *self.shape[1:]))
    out[: self.size(0)] = self
    return out


def pad_last(self, pad):
    flat = [n for p in reversed(pad) for n in (0, p)]
    return torch.nn.functional.pad(self, flat) if flat else self.clone()


def concat(tensors):
    return torch.cat(tensors)


def filled(size, fill, *, dtype=None, device=None):
    return torch.full(size, fill, dtype=dtype or torch.get_default_dtype(), device=device)


def astype(self, dtype):
    return self.to(dtype)


def nonzero_values(self):
    return self[self != 0]


def unique_counts(self):
    return torch.unique(self, return_counts=True)


def split_rows(self):
    h = self.size(0) // 2
    return self[:h].clone(), self[h:].clone(), h


def loss(input, target, reduction="mean"):
    d = (input - target) ** 2
    return d if reduction == "none" else d.mean()


def maybe_cast(self, dtype=None):
    return self.to(dtype or torch.float64)


def normalize(self):
    return self / self.abs().amax().clamp_min(1e-6)


def normalize_(self):
    return self.copy_(normalize(self))


def normalize_out(self, *, out):
    return out.copy_(normalize(self))


def accumulate(acc, x):
    acc.add_(x)


def gated(self, other, flag=False, mode="mul"):
    torch._check(self.dim() >= 1 and self.size(0) > 0, lambda: "shapetest::gated: self needs rows")
    torch._check(other.size(0) == 1 or other.size(0) == self.size(0),
                 lambda: "shapetest::gated: other broadcasts over the rows of self")
    torch._check(not flag or self.dim() == 2, lambda: "shapetest::gated: expected not flag or "
                 "self.dim() == 2")
    torch._check(self.size(-1) != 0, lambda: "shapetest::gated: self has no columns")
    wide = (flag and mode == "mul") or (not flag and mode == "div")
    return (self + other).to(torch.float64 if wide else self.dtype)


def matched_add(self, other):
    torch._check(self.shape == other.shape, lambda: "shapetest::matched_add: self and other "
                 "need one shape")
    dtype = torch.promote_types(torch.promote_types(self.dtype, other.dtype), torch.float32)
    return self.to(dtype) + other.to(dtype)


def every_other(self):
    return self.new_zeros(self.shape[::2])


def chunks(self, n):
    return [c.clone() for c in self.chunk(n)]


def doubled(tensors):
    return [t.to(torch.promote_types(t.dtype, torch.float32)) * 2 for t in tensors]


def positives(self, rows):
    return [self[i][self[i] > 0].clone() for i in range(rows)]


def keyed_select(values, indices, weights=None):
    out = [values.index_select(0, indices), indices.clone()]
    return out if weights is None else out + [weights.index_select(0, indices)]


def col_scales(self, block):
    """Per-block maxima laid out column-major, as mxfp8 kernels write their scales."""
    m, k = self.shape
    return self.reshape(m, k // block, block).abs().amax(-1).t().contiguous().t()


def scaled(self, alpha, beta=None):
    return self * alpha if beta is None else self * alpha / beta


# --------------------------------------------------------------------------------------------------
# The rules against the kernels


@pytest.fixture(scope="module")
def library(request, testing):
    return scratch.python_library(request, testing, OP_FILE)


def _case_ids():
    return scratch.case_ids(OP_FILE)


CASE_IDS = _case_ids()


def _case(library, case_id):
    return next(c for c in library.cases() if c.id == case_id)


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_fake_matches_kernel(library, case_id, testing):
    """opcheck: the fake kernel agrees with the kernel (shape, dtype, device, strides), and the op
    works under functionalization and dynamic shapes (aot_dispatch_dynamic)."""
    testing.check_opcheck(_case(library, case_id))


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_fake_is_symbolic(library, case_id, testing):
    """One graph for three input sizes: the fake kernel specializes no size."""
    testing.check_compile(_case(library, case_id), backend="aot_eager")


def test_checks_compare_scalar_arguments_with_numbers(library):
    """torchao-style preconditions on a `Scalar` (and a narrowed `float?`) hold in the fake."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = torch.ops.shapetest.scaled
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.empty(3))
        assert op(x, 2).shape == (3,) and op(x, 0.5, 2.0).shape == (3,)
        with pytest.raises(RuntimeError, match="shapetest::scaled: alpha must be positive"):
            op(x, -1)
        with pytest.raises(RuntimeError, match=r"expected beta is None or beta != 0\.0"):
            op(x, 1.5, 0.0)


def test_in_place_out_and_no_return_ops_need_no_rule(library):
    ops = {str(op.name): op for op in library.ops}
    assert ops["shapetest::normalize_"].fake is None
    assert ops["shapetest::accumulate"].fake is None
    assert S.schema_fake(ops["shapetest::normalize_"].schema) == S.FakeRule(
        (), (S.ReturnArg("self"),))
    assert S.schema_fake(ops["shapetest::accumulate"].schema) == S.FakeRule((), ())


KEYED_SELECT = """\
namespace: shapecond
ops:
  - func: keyed_select(Tensor values, Tensor indices, Tensor? weights) -> Tensor[]
    dispatch: {CPU: "tests.test_shape:keyed_select"}
    fake: "n = indices.size(0); [empty([n]), like(indices), empty([n], dtype=weights.dtype)] if weights is not None else [empty([n]), like(indices)]"
    samples:
      - {values: {shape: [5]}, indices: {values: [4, 0]}, weights: {shape: [5], dtype: float64}}
      - {values: {shape: [5]}, indices: {values: [1]}, weights: null}
"""


def test_a_tensor_list_return_may_be_a_conditional_of_output_lists(tmp_path, testing):
    """FBGEMM's keyed_jagged_index_select_dim1 returns its weights only when given some: each
    branch of the `if` is a list of outputs (it was checked as a shape, and refused)."""
    path = tmp_path / "keyed.yaml"
    path.write_text(KEYED_SELECT)
    with scratch.loaded(testing, [str(path)]) as lib:
        (op,) = lib.ops
        (out,) = op.fake.outputs
        assert isinstance(out, S.Cond)
        assert isinstance(out.then, S.OutList) and len(out.then.items) == 3
        assert isinstance(out.orelse, S.OutList) and len(out.orelse.items) == 2
        for case in lib.cases():
            testing.check_opcheck(case)


def permute_rows(input, input_sf, rows):
    out = input.index_select(0, rows)
    if input.dtype == torch.uint8 and input_sf is not None:
        return out, input_sf.index_select(0, rows)
    return out, None


PERMUTE_ROWS = """\
namespace: shapedtype
ops:
  - func: permute_rows(Tensor input, Tensor? input_sf, Tensor rows) -> (Tensor, Tensor?)
    dispatch: {CPU: "tests.test_shape:permute_rows"}
    fake: "n = rows.size(0); (empty([n, input.size(1)]), empty([n], dtype=input_sf.dtype) if input.dtype == uint8 and input_sf is not None else None)"
    samples:
      - {input: {shape: [4, 6], dtype: uint8}, input_sf: {shape: [4]}, rows: {values: [3, 0, 0]}}
      - {input: {shape: [4, 6], dtype: bfloat16}, input_sf: {shape: [4]}, rows: {values: [1]}}
"""


def test_a_tensor_s_dtype_is_a_condition(tmp_path, testing):
    """TensorRT-LLM's moe_permute returns its scales only for packed fp4 input (`if
    input.dtype == torch.float4_e2m1fn_x2`): a tensor's dtype is fixed when the op is traced,
    as a ScalarType argument is, so an `if` may compare it (it was refused)."""
    path = tmp_path / "permute.yaml"
    path.write_text(PERMUTE_ROWS)
    with scratch.loaded(testing, [str(path)]) as lib:
        (op,) = lib.ops
        cond = op.fake.outputs[1].cond
        assert cond.left == S.Compare(S.CompareOp.eq, S.TensorProp(S.Arg("input", S.TENSOR),
                                                                   S.Prop.dtype),
                                      S.DtypeLit("uint8"))
        for case in lib.cases():
            testing.check_opcheck(case)
    r = ok("like(self) if self.dtype in (int8, uint8) else like(self, dtype=promote_types("
           "self.dtype, float32))")
    assert isinstance(r.outputs[0], S.Cond)


def test_a_rule_without_the_kernel_s_strides_fails_opcheck(tmp_path, testing):
    """col_scales' kernel writes column-major scales: with `empty` (contiguous) in place of its
    rule's `empty_strided`, opcheck's fake-tensor check fails on the strides."""
    rule = "m = self.size(0); empty_strided([m, self.size(1) // block], [1, m])"
    text = (Path(__file__).resolve().parent.parent / OP_FILE).read_text()
    start = text.index("  - func: col_scales")
    end = text.find("\n  - func:", start + 1)
    entry = text[start:end if end != -1 else len(text)]
    assert rule in entry
    path = tmp_path / "contiguous.yaml"
    path.write_text("namespace: shapecontig\nops:\n" +
                    entry.replace(rule, "empty([self.size(0), self.size(1) // block])"))
    with scratch.loaded(testing, [str(path)]) as lib:
        (case,) = lib.cases()
        with pytest.raises(Exception, match="Stride mismatch"):
            testing.check_opcheck(case)


DIAG_MASK = """\
namespace: shapeorder
ops:
  - func: diag_mask(Tensor row, int M, int N, int k) -> Tensor
    dispatch: {CPU: "tests.test_shape:diag_mask"}
    fake: "empty([row.size(0) + (min(M + k, N) if k < 0 else min(M, N - k))], dtype=bool)"
    samples:
      - {row: {shape: [E=5]}, M: 3, N: 4, k: -1}
      - {row: {shape: [E=5]}, M: 3, N: 4, k: 2}
  - func: pick(Tensor self, int k) -> Tensor
    dispatch: {CPU: "tests.test_shape:pick"}
    fake: "like(self) if k >= 2 else empty([k])"
"""


def diag_mask(row, M, N, k):
    return row.new_zeros([row.size(0) + (min(M + k, N) if k < 0 else min(M, N - k))], dtype=torch.bool)


def pick(self, k):
    return self.clone() if k >= 2 else self.new_zeros([k])


def test_an_if_may_order_int_arguments(tmp_path, testing):
    """torch_sparse's non_diag_mask sizes its output by the sign of its `int k`: an int argument
    is fixed when the op is traced, so `k < 0` specializes no size (it was refused as one)."""
    from codegen.dest import cpp_meta

    path = tmp_path / "order.yaml"
    path.write_text(DIAG_MASK)
    with scratch.loaded(testing, [str(path)]) as lib:
        ops = {str(op.name): op for op in lib.ops}
        kernel = cpp_meta.translate(ops["shapeorder::pick"])[0]
        assert kernel is not None and "(k >= int64_t{2})" in "\n".join(kernel.body)
        for case in lib.cases():
            testing.check_opcheck(case)
            testing.check_compile(case, backend="aot_eager")


LIST_LENGTHS = """\
namespace: shapelen
ops:
  # pytorch/torchcodec src/torchcodec/_core/custom_ops.cpp
  - func: get_frames_by_pts(Tensor(a!) decoder, *, float[] timestamps) -> (Tensor, Tensor, Tensor)
    dispatch: {CPU: "tests.test_shape:get_frames_by_pts"}
    fake: n = len(timestamps); (empty([n, dynamic(), dynamic(), dynamic()], dtype=uint8), empty([n], dtype=float64), empty([n], dtype=float64))
    samples:
      - {decoder: {shape: [4], dtype: uint8}, timestamps: [0.0, 0.25, 0.1]}
  - func: lengths(Tensor x, bool[] keep, str[] names, Tensor?[] maybe, float[]? weights) -> Tensor
    dispatch: {CPU: "tests.test_shape:lengths"}
    fake: empty([x.size(0), len(keep), len(names), len(maybe), len(weights) if weights is not None else 0])
    samples:
      - {x: {shape: [N=2]}, keep: [true, false, true], names: [a], maybe: [{shape: [1]}, null], weights: [0.5]}
      - {x: {shape: [N=2]}, keep: [], names: [a, b], maybe: [], weights: null}
"""


def get_frames_by_pts(decoder, *, timestamps):
    n = len(timestamps)
    pts = torch.tensor(timestamps, dtype=torch.float64)
    return decoder.new_zeros([n, 3, 2, 2]), pts, torch.full_like(pts, 0.04)


def lengths(x, keep, names, maybe, weights):
    return x.new_zeros([x.size(0), len(keep), len(names), len(maybe),
                        len(weights) if weights is not None else 0])


CAUSAL_FLAGS = """\
namespace: shapeflags
ops:
  # SHI-Labs/NATTEN src/natten/ops/unfused/torch_library_ops.py: one causal flag per dim
  - func: flagged(Tensor query, Tensor? bias, SymInt[] kernel_size, bool[] is_causal) -> Tensor
    dispatch: {CPU: "tests.test_shape:flagged"}
    fake: >-
      check(not (is_causal[0] and bias is not None), "causal attention takes no bias");
      empty(query.shape[:-1] + [kernel_size[0] * kernel_size[-1] if is_causal[-1] else kernel_size[0]])
    samples:
      - {query: {shape: [N=3, 4]}, bias: {shape: [4]}, kernel_size: [2, 3], is_causal: [false, true]}
      - {query: {shape: [N=3, 4]}, bias: null, kernel_size: [2, 3], is_causal: [true, false]}
"""


def flagged(query, bias, kernel_size, is_causal):
    if is_causal[0] and bias is not None:
        raise RuntimeError("causal attention takes no bias")
    k = kernel_size[0] * kernel_size[-1] if is_causal[-1] else kernel_size[0]
    return query.new_zeros([*query.shape[:-1], k])


def test_bool_list_items_are_conditions(tmp_path):
    """NATTEN's `bool[] is_causal`, a flag per dim, is fixed when the op is traced: its items
    are conditions of checks and branches (refused: "only int lists and Tensor[] can be
    indexed"). The Python fake reads them as the kernel does."""
    from codegen import testing as cg_testing

    path = tmp_path / "flags.yaml"
    path.write_text(CAUSAL_FLAGS)
    with scratch.in_repo():
        lib = cg_testing.load_python_library([str(path)])
    try:
        (op,) = lib.ops
        assert any(isinstance(n, S.Item) and n.ty == S.Ty(S.T.BOOL) for n in op.fake.nodes())
        for case in lib.cases():
            cg_testing.check_opcheck(case)
            cg_testing.check_compile(case, backend="aot_eager")
        with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
            q, b = mode.from_tensor(torch.ones(3, 4)), mode.from_tensor(torch.ones(4))
            with pytest.raises(RuntimeError, match="causal attention takes no bias"):
                torch.ops.shapeflags.flagged(q, b, [2, 3], [True, False])
            with pytest.raises(IndexError):
                torch.ops.shapeflags.flagged(q, b, [2, 3], [])
    finally:
        lib.close()


def test_len_of_any_list_argument(tmp_path, testing):
    """A list's length is fixed when the op is traced, whatever its elements: torchcodec's
    `n = len(timestamps)` of a `float[]` (refused: "cannot be used in a fake rule"), and the
    lengths of `bool[]`, `str[]`, `Tensor?[]` and a given `float[]?`, which a Meta kernel reads
    as the C++ list's size()."""
    from codegen.dest import cpp_meta

    path = tmp_path / "lengths.yaml"
    path.write_text(LIST_LENGTHS)
    with scratch.loaded(testing, [str(path)]) as lib:
        ops = {str(op.name): op for op in lib.ops}
        kernel = cpp_meta.translate(ops["shapelen::lengths"])[0]
        assert kernel is not None
        assert kernel.body == (
            "return meta_empty(std::vector<c10::SymInt>{x.sym_size(0), "
            "c10::SymInt(static_cast<int64_t>(keep.size())), "
            "c10::SymInt(static_cast<int64_t>(names.size())), "
            "c10::SymInt(static_cast<int64_t>(maybe.size())), "
            "c10::SymInt((weights.has_value() ? static_cast<int64_t>(weights->size()) : 0))}, "
            "x, std::nullopt);",)
        for case in lib.cases():
            testing.check_opcheck(case)
            if case.op.name.name == "lengths":
                testing.check_compile(case, backend="aot_eager")


def test_data_dependent_outputs_share_a_bound_size(library):
    x = torch.tensor([3, 1, 3, 2, 1, 3])
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        values, counts = torch.ops.shapetest.unique_counts(mode.from_tensor(x))
    assert isinstance(values.shape[0], torch.SymInt)
    assert values.shape[0] is counts.shape[0] or values.shape[0] == counts.shape[0]
    assert counts.dtype == torch.int64


@pytest.mark.parametrize("self_rows, other_rows, flag, message", [
    (3, 2, False, "other broadcasts over the rows of self"),
    (0, 1, False, "self needs rows"),
    ((3, 0), 1, False, "self has no columns"),
    (3, 3, True, None),
])
def test_and_or_in_checks_assert_under_fake_tensors(library, self_rows, other_rows, flag,
                                                    message):
    """`check(a and b)`, `check(a or b)` on sizes hold the fake kernel to its conditions (each
    side where Python evaluates it), with symbolic sizes; `flag` asks for 2-d inputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        x = mode.from_tensor(torch.zeros(self_rows if isinstance(self_rows, tuple)
                                         else (self_rows, 2)))
        y = mode.from_tensor(torch.zeros(other_rows, 2))
        if message is None:
            out = torch.ops.shapetest.gated(x, y, flag)
            assert out.dtype == torch.float64
            with pytest.raises(Exception, match="expected not flag or self.dim"):
                torch.ops.shapetest.gated(mode.from_tensor(torch.zeros(3)),
                                          mode.from_tensor(torch.zeros(1)), True)
            return
        with pytest.raises(Exception, match=message):
            torch.ops.shapetest.gated(x, y, flag)


# --------------------------------------------------------------------------------------------------
# Parsing and checking


SCHEMA = ("ex::f(Tensor self, Tensor other, Tensor input, Tensor target, int[]? dim=None, "
          "bool keepdim=False, SymInt n=2, SymInt[] size=[], SymInt[] pad=[], "
          "Tensor[] tensors=[], Tensor? weight=None, str mode=\"a\", str reduction=\"mean\", *, "
          "Scalar alpha=1, ScalarType? dtype=None, Device? device=None) -> Tensor")
SCHEMA2 = SCHEMA.replace("-> Tensor", "-> (Tensor, Tensor)")


def parse(rule: str, schema: str = SCHEMA) -> tuple[S.FakeRule | None, Diagnostics]:
    diags = Diagnostics()
    text = Located(rule, Loc("t.yaml", 1, 1, len(rule)), lambda o, n: Loc("t.yaml", 1, 1 + o, n))
    return S.parse_fake_rule(text, parse_schema(schema), diags), diags


def ok(rule: str, schema: str = SCHEMA) -> S.FakeRule:
    r, diags = parse(rule, schema)
    assert r is not None and not diags.items, diags.render()
    return r


def test_reference_examples_parse():
    """Every `fake:` example of the language reference (codegen/shape.py's docstring) checks."""
    examples = re.findall(r"^\s+fake: (.+?)(?:\s+#.*)?$", S.__doc__ or "", re.M)
    assert len(examples) >= 9
    for rule in examples:
        if rule.endswith(":function") or "package.module" in rule:
            continue
        body = rule.rsplit(";", 1)[-1].strip()     # the outputs come last
        schema = SCHEMA2 if body.startswith("(") else SCHEMA
        ok(rule, schema.replace("-> Tensor", "-> Tensor[]") if body.startswith("[") else schema)


def test_ir_of_common_rules():
    self_, other = S.Arg("self", S.TENSOR), S.Arg("other", S.TENSOR)
    assert ok("like(self)").outputs == (S.Like(self_, None, None),)
    assert ok("broadcast(self, other, alpha)").outputs == (
        S.Broadcast((self_, other, S.Arg("alpha", S.Ty(S.T.SCALAR))), None),)
    assert ok("reduce(self, dim, keepdim)").outputs == (
        S.Reduce(self_, S.Arg("dim", S.Ty(S.T.INT_LIST, True)), S.Arg("keepdim", S.Ty(S.T.BOOL)),
                 None),)
    assert ok("empty([n * 2, *self.shape[1:]], dtype=int64)").outputs == (
        S.Empty(S.ListLit((S.Arith(S.ArithOp.mul, S.Arg("n", S.INT), S.IntLit(2)),
                           S.Spread(S.SliceOf(S.TensorProp(self_, S.Prop.shape), S.IntLit(1),
                                              None)))),
                S.DtypeLit("int64"), None, "self"),)


def test_and_or_follow_pythons_precedence():
    flag, mode = S.Arg("flag", S.Ty(S.T.BOOL)), S.Arg("mode", S.Ty(S.T.STR))
    schema = SCHEMA.replace("bool keepdim=False", "bool keepdim=False, bool flag=False")
    r = ok('like(self) if flag and mode == "a" or not keepdim else like(other)', schema)
    keepdim = S.Arg("keepdim", S.Ty(S.T.BOOL))
    cond = r.outputs[0].cond
    assert cond == S.BoolOp("or", S.BoolOp("and", flag, S.Compare(S.CompareOp.eq, mode,
                                                                  S.StrLit("a"))),
                            S.Not(keepdim))
    # `or` is still the optional's default where its left side is an optional value
    assert ok("like(self, dtype=dtype or float32)").outputs[0].dtype == S.Fallback(
        S.Arg("dtype", S.Ty(S.T.DTYPE, True)), S.DtypeLit("float32"))
    # a check of `a and b` is two checks, in order, with the message of the one written
    r = ok('check(self.size(0) == n and self.dim() == 2, "rows"); like(self)')
    assert [type(c.cond) for c in r.checks] == [S.Compare, S.Compare]
    assert r.checks[0].message == r.checks[1].message == "ex::f: rows"
    assert S.compares_sizes(r.checks[0].cond)
    assert not S.compares_sizes(S.Not(keepdim))


@pytest.mark.parametrize("rule, message", [
    # a size is no condition, on either side
    ("like(self) if n and keepdim else like(other)",
     "a condition must be a bool argument or a comparison, got int argument 'n'"),
    ("like(self) if keepdim or self.size(0) == 2 else like(other)",
     "'==' in an 'if' compares str, bool, int and dtype arguments with literals, and devices "
     "with devices, got an int"),
    # an optional's default of the wrong kind: `or` is neither
    ("empty([n or 1])",
     "'or' gives a default to an optional value, or joins two conditions; int argument 'n' "
     "is neither"),
])
def test_and_or_errors(rule, message):
    r, diags = parse(rule)
    assert r is None
    assert [d.message for d in diags.items] == [message]


def test_bindings_and_dynamic_sizes():
    r = ok("k = dynamic(min=1); (empty([k]), empty([k, n]))", SCHEMA2)
    assert r.bindings == (S.Binding("k", S.Dynamic(S.IntLit(1), None)),)
    assert r.uses_dynamic
    assert not ok("like(self)").uses_dynamic


@pytest.mark.parametrize("schema,rule,hint", [
    # a 5-output backward given 4 items: the hint showed 2
    ("ex::g(Tensor grad, Tensor x, Tensor w) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
     "(like(grad), like(grad), like(grad), like(grad))",
     "(like(grad), like(grad), like(grad), like(grad), like(grad))"),
    ("ex::g(Tensor[] xs, Tensor y) -> (Tensor, Tensor[], SymInt, Tensor?)", "(like(y), like(y))",
     "(like(y), [like(t) for t in xs], y.numel(), like(y))"),
    ("ex::g(Tensor y) -> (Tensor[], int)", "like(y)", "([like(y)], y.numel())"),
])
def test_output_count_hint_has_an_item_per_return(schema, rule, hint):
    """The hint is a rule the op takes, one item of its kind per return."""
    _, diags = parse(rule, schema)
    (d,) = diags.items
    assert d.hint == f"write one item per output: `{hint}`", d.hint
    ok(hint, schema)


@pytest.mark.parametrize("schema,hint", [
    ("ex::g(SymInt[] size) -> (Tensor, int, Tensor[])",
     "write one item per output: `(empty([n]), dynamic(), [empty([n]) for i in range(k)])`"),
    ("ex::g(Tensor x) -> (Tensor, float)", "write one item per output; a rule cannot describe a "
     "float return, a Python fake function can: `fake: package.module:function`"),
])
def test_output_count_hint_without_a_tensor_or_a_rule(schema, hint):
    _, diags = parse("empty([1])", schema)
    (d,) = diags.items
    assert d.hint == hint


def test_mutated_returns_are_the_arguments():
    s = "ex::g(Tensor self, Tensor(a!) out, Tensor(b!) out2) -> (Tensor(a!), Tensor(b!))"
    assert S.mutated_returns(parse_schema(s)) == ["out", "out2"]
    mixed = parse_schema("ex::g(Tensor(a!) self) -> (Tensor(a!), Tensor)")
    r = ok("like(self)", str(mixed))
    assert r.outputs[0] == S.ReturnArg("self")
    assert isinstance(r.outputs[1], S.Like)


def test_out_rule_resizes_the_out_argument():
    r = ok("like(self)", "ex::g.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)")
    assert r.outputs == (S.ReturnArg("out", S.Like(S.Arg("self", S.TENSOR), None, None)),)


def test_errors_point_into_the_rule():
    r, diags = parse("like(self, dtyp=int64)")
    assert r is None
    [d] = diags.items
    assert (d.loc.col, d.loc.length) == (12, 10)
    assert d.hint == "did you mean 'dtype'?"


def test_errors_are_collected_across_bindings():
    r, diags = parse("a = slef.size(0); b = othr.size(0); empty([a, b])")
    assert r is None
    assert [d.message for d in diags.items] == ["unknown name 'slef'", "unknown name 'othr'"]


def test_unknown_names_are_collected_within_an_expression():
    """Every unknown name of the rule, not only the first of each statement; a name bound later
    in the rule or by a comprehension is not one of them."""
    r, diags = parse("h = m; broadcast(slef, othr, [t for t in k] + [q for q in [h]])")
    assert r is None
    assert [(d.message, d.loc.col) for d in diags.items] == [
        ("unknown name 'm'", 5), ("unknown name 'slef'", 18), ("unknown name 'othr'", 24),
        ("unknown name 'k'", 42)]


# --------------------------------------------------------------------------------------------------
# The generated promotion helper against PyTorch's


def _helpers() -> dict:
    from codegen.rendering import render

    text = render("py_reg.py.j2", banner="", ns="helpers", module="m", imports=[], helpers=["result_type"], aliases=[], sections=[])
    namespace: dict = {}
    exec(compile(text.replace('_lib = torch.library.Library("helpers", "FRAGMENT")', "")
                 .replace("_ops = torch.ops.helpers", ""), "<helpers>", "exec"), namespace)
    return namespace


DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
          torch.complex128]
operand = st.one_of(
    st.tuples(st.sampled_from(DTYPES), st.sampled_from([0, 1, 2])).map(
        lambda t: torch.zeros((2,) * t[1], dtype=t[0])),
    st.sampled_from([True, 3, 2.5, 1j]),
)


@given(st.lists(operand, min_size=1, max_size=4).filter(
    lambda ops: any(isinstance(o, torch.Tensor) for o in ops)))
def test_result_type_matches_pytorch(operands):
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    result_type = _HELPERS["_result_type"]
    _, expected = elementwise_dtypes(
        *operands, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    assert result_type(*operands) == expected
    if len(operands) == 2:
        assert result_type(*operands) == torch.result_type(*operands)


_HELPERS = _helpers()


# --------------------------------------------------------------------------------------------------
# Hostile rules: literals, constant sizes, nesting


def _messages(rule: str, schema: str = SCHEMA) -> list[str]:
    r, diags = parse(rule, schema)
    assert (r is None) == bool(diags.items)
    return [d.message for d in diags.items]


def test_literals_are_checked_where_they_are_written():
    assert _messages("empty([99999999999999999999999])") == [
        "integer '99999999999999999999999' is out of range: integers are 64-bit"]
    assert _messages("empty([0777])") == ["integer '0777' has leading zeros"]
    assert _messages("broadcast(self, 1e999)") == [
        "number '1e999' is out of range for a double"]
    assert _messages('like(self) if mode == "\\N{nope}" else like(other)') == [
        "unknown Unicode character name 'nope' in '\\N{nope}'"]
    assert _messages("like(self) if mode == 'a\rb' else like(other)") == [
        "character U+000D in a string literal"]


def test_constant_sizes_are_int64_and_never_negative():
    ok("empty([9223372036854775807, n - 1, 0])")
    ok("reduce(self, [-1, 0])")                   # dims may be negative; sizes may not
    ok("empty([2 - 1] + [max(3, 4) * 2])")
    big = "the value of this expression is out of range: integers are 64-bit"
    assert _messages("empty([9223372036854775807 + 1])") == [big]
    assert _messages("empty([-(0 - 9223372036854775807 - 1)])") == [big]
    assert _messages("empty([n, 2 - 3])") == ["a size is never negative, got -1"]
    assert _messages("empty([1] + [-1])") == ["a size is never negative, got -1"]
    assert _messages("empty([n % 0])") == ["'%' by zero"]
    assert _messages("empty([dynamic(max=-2)])") == ["the max of a size is never negative, got -2"]


def test_the_largest_size_literal_reaches_cpp_as_int64(tmp_path):
    from codegen.dest import cpp_meta
    from codegen.load import load_library

    p = tmp_path / "ops.yaml"
    p.write_text("- func: ex::f(Tensor self) -> Tensor\n  dispatch: {CPU: f_cpu}\n"
                 "  fake: empty([9223372036854775807, 2147483648, 7])\n")
    [op] = load_library([str(p)]).ops
    kernel, _ = cpp_meta.translate(op)
    assert kernel is not None
    assert ("std::vector<c10::SymInt>{c10::SymInt(int64_t{9223372036854775807}), "
            "c10::SymInt(int64_t{2147483648}), c10::SymInt(7)}") in kernel.body[0]


def test_nesting_is_bounded():
    ok("empty([" + "-" * 96 + "n])")
    assert _messages("empty([" + "-" * 97 + "n])") == [
        "fake rule: nested more than 100 levels deep"]


def test_a_returned_optional_argument_takes_an_item():
    """FlashAttention-3's `Tensor(out!)? out -> (Tensor(out!), ...)`: with `out` None the kernel
    returns a new tensor, which the rule's item for that return describes."""
    schema = "ns::combine(Tensor x, Tensor(out!)? out=None) -> (Tensor(out!), Tensor)"
    x = S.Arg("x", S.TENSOR)
    rule = ok("(like(x), empty([x.size(0)]))", schema)
    assert rule.outputs[0] == S.ReturnArg("out", otherwise=S.Like(x, None, None))
    assert S.schema_fake(parse_schema("ns::f(Tensor x, Tensor(a!)? out=None) -> Tensor(a!)")) \
        is None
    assert S.schema_fake(parse_schema("ns::f(Tensor x, Tensor(a!) out) -> Tensor(a!)")) \
        == S.FakeRule((), (S.ReturnArg("out"),))


def test_the_fake_of_a_returned_optional_argument_is_never_none(testing, tmp_path,
                                                                 monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    monkeypatch.syspath_prepend(str(scratch.REPO))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.yaml").write_text(
        "namespace: optret\nops:\n"
        "  - func: combine(Tensor x, Tensor(out!)? out=None) -> (Tensor(out!), Tensor)\n"
        "    dispatch: {CompositeExplicitAutograd: 'tests.test_shape:combine'}\n"
        "    fake: (like(x), empty([x.size(0)]))\n")
    lib = testing.load_python_library(["ops.yaml"])
    try:
        x = torch.randn(3, 2)
        with FakeTensorMode() as mode:
            fx = mode.from_tensor(x)
            made, _ = torch.ops.optret.combine(fx)
            given = torch.empty_like(fx)
            kept, _ = torch.ops.optret.combine(fx, given)
        assert made is not None and made.shape == x.shape
        assert kept is given
    finally:
        lib.close()


def combine(x, out=None):
    if out is None:
        return x.clone(), x.sum(1)
    out.copy_(x)
    return out, x.sum(1)


# --------------------------------------------------------------------------------------------------
# Optional arguments narrowed by a None test (torch_scatter's `Tensor? out`, `int? dim_size`)


@pytest.mark.parametrize("rule", [
    "like(weight) if weight is not None else like(self)",
    "like(self) if weight is None else like(weight)",
    "like(weight) if not weight is None else like(self)",
    "like(weight) if weight is not None and mode == 'a' else like(self)",
    "like(self) if weight is None or mode == 'a' else like(weight)",
    "empty(weight.shape[:1]) if weight is not None else empty([n])",
    "check(weight is None or weight.shape == self.shape); like(self)",
    "check(weight is not None and weight.size(0) == n); like(self)",
    "like(weight) if weight is not None else (like(weight) if weight is not None else like(self))",
])
def test_a_none_test_narrows_the_optional_argument(rule):
    r = ok(rule)
    assert any(isinstance(n, S.Given) and n.arg.name == "weight" for n in S.walk(*r.outputs, *(c.cond for c in r.checks)))


@pytest.mark.parametrize("rule,col", [
    ("like(weight)", 6),
    ("like(weight) if weight is None else like(self)", 6),
    ("like(weight) if weight is not None or mode == 'a' else like(self)", 6),
    ("like(self) if weight is not None else like(weight)", 44),
    ("like(weight) if mode == 'a' else like(self)", 6),
    # A SymBool on the left of `or` does not short-circuit: the right side runs on None too.
    ("check(self.size(0) == n or weight is None or weight.size(0) == n); like(self)", 46),
])
def test_no_narrowing_where_the_argument_may_be_none(rule, col):
    r, diags = parse(rule)
    assert r is None
    [d] = diags.items
    assert d.message.endswith("must be a Tensor, got Tensor? argument 'weight'"), d.message
    assert d.loc.col == col
    assert d.hint == "an optional tensor may be None; only broadcast() accepts one"


FLAGS = "ex::f(Tensor self, bool? per_tensor, str? mode, int? k, ScalarType? dtype) -> Tensor"


@pytest.mark.parametrize("rule", [
    # apex's `bool? per_tensor_python`: given, it is a bool fixed when the op is traced
    "empty([self.size(0)]) if per_tensor is not None and per_tensor else empty([1])",
    "empty([1]) if per_tensor is None or not per_tensor else empty([self.size(0)])",
    "empty([self.size(0)]) if per_tensor is None or per_tensor else empty([1])",
    "like(self) if mode is not None and mode == 'rows' else empty([1])",
    "like(self) if k is not None and k > 2 else empty([1])",
    # the condition held whole: `k` is given in the branch, though `k > 2` compares ints
    "empty([k]) if k is not None and k > 2 else empty([1])",
    "empty([1]) if k is None or k < 2 else empty([k, k])",
    "like(self) if dtype is not None and dtype == float32 else empty([1])",
])
def test_a_narrowed_optional_is_a_condition(rule):
    r = ok(rule, FLAGS)
    assert any(isinstance(n, S.Given) for n in S.walk(*r.outputs))


@pytest.mark.parametrize("rule, col, message", [
    ("empty([1]) if per_tensor else like(self)", 15,
     "a condition must be a bool argument or a comparison, got bool? argument 'per_tensor'"),
    ("empty([1]) if per_tensor is not None or per_tensor else like(self)", 41,
     "a condition must be a bool argument or a comparison, got bool? argument 'per_tensor'"),
    ("like(self) if mode == 'rows' else empty([1])", 15,
     "'==' in an 'if' compares str, bool, int and dtype arguments with literals, and devices "
     "with devices, got str? argument 'mode'"),
])
def test_an_optional_that_may_be_none_is_no_condition(rule, col, message):
    r, diags = parse(rule, FLAGS)
    assert r is None
    [d] = diags.items
    assert (d.message, d.loc.col) == (message, col)


def test_narrowed_int_is_a_size():
    schema = "ex::f(Tensor src, int? dim_size) -> Tensor"
    ok("empty([dim_size]) if dim_size is not None else empty([dynamic()])", schema)
    r, diags = parse("empty([dim_size])", schema)
    assert r is None and diags.items[0].message == \
        "a shape element must be an int, got int? argument 'dim_size'"


@pytest.mark.parametrize("rule", [
    "like(x) if normalize is None or normalize else like(x, dtype=int16)",
    "like(x, dtype=int16) if normalize is not None and not normalize else like(x)",
    "like(x) if fmt is None or fmt == 'wav' else like(x, dtype=int16)",
])
def test_narrowed_bool_and_str_are_conditions(rule):
    """torchaudio's load_audio_file(..., bool? normalize, ..., str? format): an optional bool or
    str where a None test tells it is given is fixed at trace time, as its plain type is."""
    ok(rule, "ex::f(Tensor x, bool? normalize, str? fmt) -> Tensor")


def test_narrowed_bool_fake_runs_under_fake_tensors(tmp_path, monkeypatch):
    from codegen import testing

    (tmp_path / "narrowbool.yaml").write_text("""\
namespace: narrowbool
ops:
  - func: quantize(Tensor x, bool? normalize) -> Tensor
    dispatch: {CPU: 'narrowbool_kernels:quantize'}
    fake: like(x) if normalize is None or normalize else like(x, dtype=int16)
    samples:
      - {x: {shape: [4]}, normalize: null}
      - {x: {shape: [4]}, normalize: true}
      - {x: {shape: [4]}, normalize: false}
""")
    (tmp_path / "narrowbool_kernels.py").write_text("""\
import torch
def quantize(x, normalize):
    return x.clone() if normalize is None or normalize else (x * 32767).to(torch.int16)
""")
    monkeypatch.syspath_prepend(str(tmp_path))
    lib = testing.load_python_library([str(tmp_path / "narrowbool.yaml")])
    try:
        for case in lib.cases():
            testing.check_opcheck(case)
    finally:
        lib.close()


@pytest.mark.parametrize("rule,col", [
    ("(empty([dynamic(), 2]), dynamic())", 25),
    ("k = dynamic(); (empty([k, 2]), k)", 32),
    ("r = dynamic(); (like(self), r * 2)", 29),
])
def test_a_data_dependent_int_return_is_refused(rule, col):
    """torchaudio's load_audio_file(...) -> (Tensor, int) reads its sample rate from the file:
    torch turns an `int` return into a Python int when tracing, and a dynamic() size cannot be
    one (torch.compile failed on every call: 'Could not extract specialized integer')."""
    r, diags = parse(rule, "ex::f(Tensor self) -> (Tensor, int)")
    assert r is None
    [d] = diags.items
    assert d.message == ("the output for return type 'int' is a dynamic() size, but torch makes "
                         "an int return a Python int when tracing, which a data-dependent size "
                         "cannot be: torch.compile and torch.export would fail on every call")
    assert d.hint == "declare the return `SymInt`, which may hold a data-dependent size"
    assert d.loc.col == col
    ok(rule, "ex::f(Tensor self) -> (Tensor, SymInt)")
    ok("(empty([dynamic(), 2]), self.size(0))", "ex::f(Tensor self) -> (Tensor, int)")


def test_narrowed_fake_runs_under_fake_tensors(tmp_path, monkeypatch):
    """The generated Python fake of a narrowing rule, with the optional argument given and not."""
    from codegen import testing

    (tmp_path / "narrow.yaml").write_text("""\
namespace: narrowtest
ops:
  - func: scatter(Tensor src, Tensor index, Tensor? out, int? dim_size) -> Tensor
    dispatch: {CPU: 'narrow_kernels:scatter'}
    fake: like(out) if out is not None else (empty([dim_size] + src.shape[1:]) if dim_size is not None else empty([dynamic()] + src.shape[1:]))
    samples:
      - {src: {shape: [N=5, 2]}, index: {values: [0, 2, 2, 1, 0]}, out: null, dim_size: 4}
      - {src: {shape: [5, 2]}, index: {values: [0, 2, 2, 1, 0]}, out: {shape: [3, 2]}, dim_size: null}
      - {src: {shape: [5, 2]}, index: {values: [0, 2, 2, 1, 0]}, out: null, dim_size: null}
""")
    (tmp_path / "narrow_kernels.py").write_text("""\
import torch
def scatter(src, index, out, dim_size):
    n = out.size(0) if out is not None else dim_size if dim_size is not None else int(index.max()) + 1
    res = out.clone() if out is not None else src.new_zeros((n, *src.shape[1:]))
    return res.index_add(0, index, src)
""")
    monkeypatch.syspath_prepend(str(tmp_path))
    lib = testing.load_python_library([str(tmp_path / "narrow.yaml")])
    try:
        cases = lib.cases()
        assert len(cases) == 3
        for case in cases:
            testing.check_opcheck(case)
    finally:
        lib.close()


@pytest.mark.parametrize("rule", [
    "k = dynamic(); (empty([k]), empty([k]))",
    "k = dynamic(); m = k * 2; (empty([m]), empty([1]))",
    "k = dynamic(); (empty([k]) if mode == 'a' else empty([k, 2]), like(self))",
    "k = dynamic(); (empty([n]) if mode == 'a' else empty([k]), empty([k]))",
    "k = dynamic() if mode == 'a' else n; (empty([k]), like(self))",
    "k = dynamic() if mode == 'a' else 3; (empty([k]) if mode == 'a' else like(self), like(self))",
])
def test_dynamic_bindings_every_branch_uses(rule):
    ok(rule, SCHEMA2)


@pytest.mark.parametrize("rule,which", [
    ("k = dynamic(); (empty([n]) if mode == 'a' else empty([k]), like(self))", "only some branches"),
    ("k = dynamic(); (empty(dim or [k]), like(self))", "only some branches"),
    ("k = dynamic(); m = [k]; s = m if mode == 'a' else [n]; (empty(s), like(self))", "only some branches"),
    ("k = dynamic(); check(k >= 0); (like(self), like(self))", "no output"),
])
def test_dynamic_bindings_some_branch_drops(rule, which):
    r, diags = parse(rule, SCHEMA2)
    assert r is None
    [d] = diags.items
    assert d.message.startswith("'k' is a dynamic() size, but " + which), d.message
    assert d.loc.col == 1


def test_membership_is_a_chain_of_equalities():
    """`x in (a, b)` reads as `x == a or x == b` and `x not in [a, b]` as `x != a and x != b`
    (bitsandbytes' fakes check `quant_type in ("nf4", "fp4")`, `dtype in (float16, ...)`)."""
    mode, dtype = S.Arg("mode", S.Ty(S.T.STR)), S.TensorProp(S.Arg("self", S.TENSOR), S.Prop.dtype)
    r = ok('check(mode in ("a", "b"), "mode"); check(self.dtype not in [int8, uint8]); like(self)')
    assert [c.cond for c in r.checks] == [
        S.BoolOp("or", S.Compare(S.CompareOp.eq, mode, S.StrLit("a")),
                 S.Compare(S.CompareOp.eq, mode, S.StrLit("b"))),
        S.Compare(S.CompareOp.ne, dtype, S.DtypeLit("int8")),
        S.Compare(S.CompareOp.ne, dtype, S.DtypeLit("uint8"))]
    assert r.checks[1].message == "ex::f: expected self.dtype not in [int8, uint8]"
    cond = ok('like(self) if reduction in ("sum",) else like(other)').outputs[0].cond
    assert cond == S.Compare(S.CompareOp.eq, S.Arg("reduction", S.Ty(S.T.STR)), S.StrLit("sum"))


@pytest.mark.parametrize("rule, message", [
    ("like(self) if mode in (1, 2) else like(other)",
     "'in' of str argument 'mode' and an int: they are never equal"),
    ("like(self) if self.size(0) in (1, 2) else like(other)",
     "'in' in an 'if' compares str, bool, int and dtype arguments with literals, and devices "
     "with devices, got an int"),
    ("check(mode not in size); like(self)",
     "'not in' tests membership in a tuple or list written out, of one item or more"),
    ("check(mode in []); like(self)",
     "'in' tests membership in a tuple or list written out, of one item or more"),
])
def test_membership_errors(rule, message):
    r, diags = parse(rule)
    assert r is None
    assert [d.message for d in diags.items] == [message]


def test_membership_checks_run_in_the_fake(tmp_path, monkeypatch):
    """The checks of a rule with `in`, as its Python fake runs them (a dynamic() size keeps the
    rule in Python) and as its C++ Meta kernel would write them."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from codegen import testing
    from codegen.dest import cpp_meta
    from codegen.load import load_library

    op_file = tmp_path / "member.yaml"
    op_file.write_text("""\
namespace: membertest
ops:
  - func: q(Tensor A, int blocksize, str quant_type) -> Tensor
    dispatch: {CPU: 'member_kernels:q'}
    fake: >-
      check(blocksize in (32, 64), "invalid blocksize");
      check(quant_type in ("nf4", "fp4"), "bad quant_type");
      check(A.dtype not in (int8, uint8), "A must be floating");
      empty([dynamic()])
  - func: r(Tensor A, str quant_type) -> Tensor
    dispatch: {CPU: r_cpu}
    fake: check(quant_type in ("nf4", "fp4"), "bad quant_type"); like(A)
""")
    (tmp_path / "member_kernels.py").write_text(
        "import torch\ndef q(A, blocksize, quant_type):\n    return A.reshape(-1).clone()\n")
    r = next(op for op in load_library([str(op_file)]).ops if op.schema.name.name == "r")
    kernel, _ = cpp_meta.translate(r)
    assert kernel is not None
    assert 'TORCH_CHECK(((quant_type == "nf4") || (quant_type == "fp4")), ' \
        '"membertest::r: bad quant_type");' in kernel.body
    monkeypatch.syspath_prepend(str(tmp_path))
    lib = testing.load_python_library([str(op_file)])
    try:
        q = torch.ops.membertest.q
        with FakeTensorMode(shape_env=ShapeEnv()) as mode:
            x = mode.from_tensor(torch.zeros(4))
            assert q(x, 64, "fp4").dim() == 1
            for args, message in [((x, 48, "nf4"), "invalid blocksize"),
                                  ((x, 32, "int4"), "bad quant_type"),
                                  ((mode.from_tensor(torch.zeros(4, dtype=torch.uint8)), 32,
                                    "nf4"), "A must be floating")]:
                with pytest.raises(Exception, match=f"membertest::q: {message}"):
                    q(*args)
    finally:
        lib.close()


def test_python_fake_compares_a_shape_with_a_list(tmp_path, monkeypatch):
    """A torch.Size never equals a list in Python: `check(B.shape == A.shape[:-1] + [3])` and
    `check(A.shape == shape)` of an `int[]` argument held only for no input at all."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from codegen import testing

    op_file = tmp_path / "shapelist.yaml"
    op_file.write_text("""\
namespace: shapelisttest
ops:
  - func: f(Tensor A, Tensor B, int[] shape) -> Tensor
    dispatch: {CPU: 'shapelist_kernels:f'}
    fake: >-
      check(B.shape == A.shape[:-1] + [3], "B is not A.shape[:-1] + [3]");
      check(A.shape == shape, "A is not shape");
      check(B.shape[:1] == A.shape[:1]);
      empty([dynamic()])
""")
    (tmp_path / "shapelist_kernels.py").write_text(
        "def f(A, B, shape):\n    return A.reshape(-1).clone()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    lib = testing.load_python_library([str(op_file)])
    try:
        f = torch.ops.shapelisttest.f
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
        with FakeTensorMode(shape_env=ShapeEnv()) as mode:
            a = mode.from_tensor(torch.zeros(2, 5))
            assert f(a, mode.from_tensor(torch.zeros(2, 3)), [2, 5]).dim() == 1
            with pytest.raises(Exception, match="B is not A.shape"):
                f(a, mode.from_tensor(torch.zeros(2, 4)), [2, 5])
            with pytest.raises(Exception, match="A is not shape"):
                f(a, mode.from_tensor(torch.zeros(2, 3)), [2, 6])
    finally:
        lib.close()


def test_a_rule_of_checks_alone_for_an_op_returning_what_its_schema_says():
    """An op returning nothing, or only what it mutates, takes checks without outputs; its
    outputs still follow from the schema."""
    out = ok('check(out.dtype == int32, "out must be int32"); '
             "check(out.shape == A.shape[:-1] + [B.size(0)])",
             "ex::f(Tensor A, Tensor B, Tensor! out) -> ()")
    assert out.outputs == () and [c.message for c in out.checks] == [
        "ex::f: out must be int32", "ex::f: expected out.shape == A.shape[:-1] + [B.size(0)]"]
    r = ok('check(how in ("zero", "one"))', "ex::f_(Tensor(a!) self, str how) -> Tensor(a!)")
    assert r.outputs == (S.ReturnArg("self"),) and len(r.checks) == 1
    r = ok("check(out.dtype == self.dtype)",
           "ex::f(Tensor self, *, Tensor(a!) out) -> Tensor(a!)")
    assert r.outputs == (S.ReturnArg("out"),) and len(r.checks) == 1


def test_checks_alone_run_in_the_fake_of_an_op_returning_nothing(tmp_path, monkeypatch):
    """bitsandbytes' `int8_linear_matmul.out(Tensor A, Tensor B, Tensor! out) -> ()` checks `out`
    in its fake: as a Python fake (nothing built) and as a Meta kernel."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from codegen import testing
    from codegen.dest import cpp_meta
    from codegen.load import load_library

    op_file = tmp_path / "outcheck.yaml"
    op_file.write_text("""\
namespace: outchecktest
ops:
  - func: mm_out(Tensor A, Tensor B, Tensor! out) -> ()
    dispatch: {CPU: 'outcheck_kernels:mm_out'}
    fake: >-
      check(out.dtype == int32, "out must be int32");
      check(out.shape == A.shape[:-1] + [B.size(0)], "out has the wrong shape")
    samples:
      - {A: {shape: [3, 4], dtype: int8}, B: {shape: [5, 4], dtype: int8}, out: {shape: [3, 5], dtype: int32}}
""")
    (tmp_path / "outcheck_kernels.py").write_text(
        "def mm_out(A, B, out):\n    out.copy_(A.int() @ B.int().t())\n")
    [op] = load_library([str(op_file)]).ops
    kernel, _ = cpp_meta.translate(op)
    assert kernel is not None
    assert 'TORCH_CHECK((out.scalar_type() == at::ScalarType::Int), ' \
        '"outchecktest::mm_out: out must be int32");' in kernel.body
    monkeypatch.syspath_prepend(str(tmp_path))
    lib = testing.load_python_library([str(op_file)])
    try:
        [case] = lib.cases()
        testing.check_opcheck(case)
        mm_out = torch.ops.outchecktest.mm_out
        with FakeTensorMode() as mode:
            a, b = (mode.from_tensor(torch.zeros(3, 4, dtype=torch.int8)),
                    mode.from_tensor(torch.zeros(5, 4, dtype=torch.int8)))
            assert mm_out(a, b, mode.from_tensor(torch.zeros(3, 5, dtype=torch.int32))) is None
            with pytest.raises(Exception, match="outchecktest::mm_out: out must be int32"):
                mm_out(a, b, mode.from_tensor(torch.zeros(3, 5)))
            with pytest.raises(Exception, match="outchecktest::mm_out: out has the wrong shape"):
                mm_out(a, b, mode.from_tensor(torch.zeros(3, 4, dtype=torch.int32)))
    finally:
        lib.close()


def test_a_dynamic_size_bound_alone_may_also_be_added_to(tmp_path):
    """torch binds a data-dependent size from an output size that is the size or a multiple of
    it; once bound, sums of it are fine (fake_dynamic_in_sum.yaml has the refused forms)."""
    from codegen.load import load_library

    path = tmp_path / "bound.yaml"
    path.write_text(textwrap.dedent("""\
        - func: 'ub::fine(Tensor x) -> (Tensor, Tensor)'
          fake: 'n = dynamic(); (empty([n]), empty([x.size(0) + n]))'
        - func: 'ub::twice(Tensor x) -> Tensor'
          fake: 'n = dynamic(); empty([2 * n, x.size(0)])'
        """))
    ops = {str(op.name): op for op in load_library([str(path)]).ops}
    assert set(ops) == {"ub::fine", "ub::twice"}


# --------------------------------------------------------------------------------------------------
# The byte size of a dtype

QUANT = "ex::q(Tensor A, int blocksize, ScalarType storage, ScalarType? dtype=None) -> Tensor"


def test_itemsize_of_a_dtype_is_an_int():
    """`storage.itemsize` of a ScalarType argument, `A.dtype.itemsize`, `A.element_size()` and
    torch's `A.itemsize` are one IR: the bytes of an element, an int fixed when traced
    (bitsandbytes' quantize_4bit packs `(n + 1) // (quant_storage.itemsize * 2)` elements)."""
    A, storage = S.Arg("A", S.TENSOR), S.Arg("storage", S.DTYPE)
    of_a = S.ItemSize(S.TensorProp(A, S.Prop.dtype))
    r = ok("empty([(A.numel() + 1) // (storage.itemsize * 2), 1], dtype=storage)", QUANT)
    assert r.outputs[0].shape.items[0] == S.Arith(
        S.ArithOp.floordiv,
        S.Arith(S.ArithOp.add, S.TensorProp(A, S.Prop.numel), S.IntLit(1)),
        S.Arith(S.ArithOp.mul, S.ItemSize(storage), S.IntLit(2)))
    for written in ("A.dtype.itemsize", "A.element_size()", "A.itemsize"):
        assert ok(f"empty([A.numel() * {written}], dtype=uint8)", QUANT).outputs[0].shape \
            == S.ListLit((S.Arith(S.ArithOp.mul, S.TensorProp(A, S.Prop.numel), of_a),)), written
    # any dtype: a literal, a default, promote_types, a guarded optional
    assert ok("empty([float16.itemsize])", QUANT).outputs[0].shape == S.ListLit(
        (S.ItemSize(S.DtypeLit("float16")),))
    ok("empty([(dtype or float32).itemsize, promote_types(A.dtype, storage).itemsize])", QUANT)
    r = ok("empty([dtype.itemsize]) if dtype is not None else like(A)", QUANT)
    assert r.outputs[0].then.shape.items[0] == S.ItemSize(
        S.Given(S.Arg("dtype", S.Ty(S.T.DTYPE, True))))
    # fixed when traced: an `if` may compare it, a count may be it
    ok("like(A) if storage.itemsize == 1 else empty([A.numel() // storage.itemsize])", QUANT)
    ok("[like(A) for i in range(A.element_size())]",
       "ex::q(Tensor A) -> Tensor[]")
    ok("empty([dynamic(max=A.element_size())])", QUANT)


@pytest.mark.parametrize("rule, message, hint", [
    ("empty([blocksize.itemsize])",
     "'.itemsize' is the byte size of a dtype, got int argument 'blocksize'",
     "a ScalarType argument, `t.dtype`, a dtype name (`float32`), or `t.element_size()` of a "
     "tensor"),
    ("empty([dtype.itemsize])",
     "'.itemsize' of dtype? argument 'dtype', which may be None",
     "test it first (`... if dtype is not None else ...`) or give a default: "
     "`(dtype or float32).itemsize`"),
    ("empty([A.element_size])", "'element_size' is a method; call it: A.element_size()", None),
    ("empty([A.dtype.itemsize()])", "'itemsize' is an attribute, not a method",
     "write `A.dtype.itemsize` without parentheses"),
    ("empty([A.element_size(0)])", "element_size() takes 0 arguments but 1 were given", None),
])
def test_itemsize_errors(rule, message, hint):
    r, diags = parse(rule, QUANT)
    assert r is None
    [d] = diags.items
    assert (d.message, d.hint) == (message, hint)


ITEMSIZE_OPS = """\
namespace: itemsizetest
ops:
  - func: quantize(Tensor A, int blocksize, ScalarType storage) -> (Tensor, Tensor)
    dispatch: {CPU: 'itemsize_kernels:quantize'}
    fake: >-
      check(A.dtype in (float16, bfloat16, float32), "A must be floating");
      (empty([(A.numel() + 1) // (storage.itemsize * 2), 1], dtype=storage),
       empty([(A.numel() + blocksize - 1) // blocksize], dtype=float32))
    samples:
      uint8: {A: {shape: [8, 16]}, blocksize: 64, storage: uint8}
      float32: {A: {shape: [4, 16]}, blocksize: 64, storage: float32}
  - func: as_bytes(Tensor A) -> Tensor
    dispatch: {CPU: 'itemsize_kernels:as_bytes'}
    fake: empty([A.numel() * A.element_size()], dtype=uint8)
    samples:
      float32: {A: {shape: [3, 5]}}
      float16: {A: {shape: [3, 5], dtype: float16}}
  - func: widen(Tensor A, ScalarType dtype) -> Tensor
    dispatch: {CPU: 'itemsize_kernels:widen'}
    fake: empty([A.numel() * dtype.itemsize], dtype=uint8)
    samples:
      float64: {A: {shape: [2, 3]}, dtype: float64}
      int16: {A: {shape: [2, 3]}, dtype: int16}
"""

ITEMSIZE_KERNELS = """\
import torch


def quantize(A, blocksize, storage):
    n = A.numel()
    codes = (A.reshape(-1).abs() * 7).clamp(max=15).to(torch.uint8)
    codes = torch.cat([codes, codes.new_zeros(n % 2)])
    packed = (codes[0::2] << 4) | codes[1::2]
    # Bytes reinterpreted as the storage dtype, as bitsandbytes' quant_storage does.
    packed = torch.cat([packed, packed.new_zeros(-packed.numel() % storage.itemsize)])
    absmax = torch.nn.functional.pad(A.reshape(-1), (0, -n % blocksize)).reshape(-1, blocksize)
    return packed.view(storage).reshape(-1, 1), absmax.abs().amax(1).float()


def as_bytes(A):
    return A.contiguous().reshape(-1).view(torch.uint8).clone()


def widen(A, dtype):
    return A.to(dtype).reshape(-1).view(torch.uint8).clone()
"""


def test_itemsize_fakes_run_with_two_dtypes(tmp_path, monkeypatch, testing):
    """Output sizes from the byte size of a ScalarType argument and of a tensor's dtype: opcheck
    and one compiled graph for three sizes pass for two dtypes each; the Meta kernels take the
    size from c10::elementSize, `//` included."""
    from codegen.dest import cpp_meta
    from codegen.load import load_library

    op_file = tmp_path / "itemsize.yaml"
    op_file.write_text(ITEMSIZE_OPS)
    (tmp_path / "itemsize_kernels.py").write_text(ITEMSIZE_KERNELS)
    ops = {op.schema.name.name: op for op in load_library([str(op_file)]).ops}
    quantize = "\n".join(cpp_meta.translate(ops["quantize"])[0].body)
    assert ('meta_floordiv((A.sym_numel() + c10::SymInt(1)), c10::SymInt((static_cast<int64_t>('
            'c10::elementSize(storage)) * 2)), "itemsizetest::quantize", '
            '"(A.numel() + 1) // (storage.itemsize * 2)")') in quantize
    assert cpp_meta.translate(ops["as_bytes"])[0].body == (
        "return meta_empty(std::vector<c10::SymInt>{(A.sym_numel() * "
        "c10::SymInt(static_cast<int64_t>(c10::elementSize(A.scalar_type()))))}, A, "
        "at::ScalarType::Byte);",)
    assert cpp_meta.translate(ops["widen"])[0].body == (
        "return meta_empty(std::vector<c10::SymInt>{(A.sym_numel() * "
        "c10::SymInt(static_cast<int64_t>(c10::elementSize(dtype))))}, A, "
        "at::ScalarType::Byte);",)
    monkeypatch.syspath_prepend(str(tmp_path))
    lib = testing.load_python_library([str(op_file)])
    try:
        cases = lib.cases()
        assert len(cases) == 6
        for case in cases:
            testing.check_opcheck(case)
            testing.check_compile(case, backend="aot_eager")
        A = torch.randn(8, 16)
        for storage, rows in ((torch.uint8, 64), (torch.float32, 16)):
            packed, absmax = torch.ops.itemsizetest.quantize(A, 64, storage)
            assert (packed.shape, packed.dtype, absmax.shape) == ((rows, 1), storage, (2,))
    finally:
        lib.close()


RANKED = """\
namespace: shaperank
ops:
  - func: packed_rows(Tensor weight, int[] sizes) -> Tensor
    dispatch: {CPU: "tests.test_shape:packed_rows"}
    fake: "n = weight.size(0) * weight.size(3) if weight.dim() == 4 else weight.size(0); empty([n, len(sizes)] if len(sizes) > 1 else [n])"
    samples:
      - {weight: {shape: [N=6, 3]}, sizes: [1]}
      - {weight: {shape: [N=2, 1, 3, 4]}, sizes: [1, 2]}
"""


def packed_rows(weight, sizes):
    n = weight.size(0) * weight.size(3) if weight.dim() == 4 else weight.size(0)
    return weight.new_zeros([n, len(sizes)] if len(sizes) > 1 else [n])


def test_an_if_may_compare_ranks_and_list_lengths(tmp_path, testing):
    """torchao's float8_linear_cpu fake takes N from a prepacked 4D weight or a plain 2D one:
    a rank (and a list's length) is a plain int when the op is traced, as an int argument is,
    so comparing it specializes no size (it was refused as a size)."""
    path = tmp_path / "rank.yaml"
    path.write_text(RANKED)
    with scratch.loaded(testing, [str(path)]) as lib:
        (op,) = lib.ops
        assert isinstance(op.fake.bindings[0].value, S.Cond)
        for case in lib.cases():
            testing.check_opcheck(case)
            testing.check_compile(case, backend="aot_eager")


MX_SCALES = """\
namespace: shapemx
ops:
  - func: mx_rows(Tensor a, Tensor a_scale) -> Tensor
    dispatch: {CPU: "tests.test_shape:mx_rows"}
    fake: "check(a_scale.dtype in (uint8, float8_e8m0fnu), \\"scales must be uint8 or float8_e8m0fnu\\"); empty([a.size(0)], dtype=bfloat16)"
    samples:
      - {a: {shape: [M=3, 32]}, a_scale: {shape: [M, 1], dtype: float8_e8m0fnu}}
      - {a: {shape: [M=3, 32]}, a_scale: {shape: [M, 1], dtype: uint8, low: 120, high: 130}}
"""


def mx_rows(a, a_scale):
    s = a_scale.float() if a_scale.dtype != torch.uint8 else torch.pow(2.0, a_scale.float() - 127)
    return (a.float() * s).sum(1).to(torch.bfloat16)


def test_mx_scales_are_float8_e8m0fnu(tmp_path, testing):
    """torchao's mx_fp8_bf16 takes E8M0 scales as uint8 or float8_e8m0fnu: fake rules and
    samples name that dtype (it was an unknown name)."""
    path = tmp_path / "mx.yaml"
    path.write_text(MX_SCALES)
    with scratch.loaded(testing, [str(path)]) as lib:
        cases = lib.cases()
        assert testing.make_named(cases[0].op, cases[0].sample)["a_scale"].dtype == \
            torch.float8_e8m0fnu
        for case in cases:     # opcheck's test_schema has no allclose for float8 tensors
            testing.check_compile(case, backend="aot_eager")
