"""The sample checks (codegen/testing.py) on a library written to exercise them:
tests/samplelib/ops.yaml, one op per kind of behaviour the checks must read from an op file
(structural sizes tied to int arguments, index tensors over a SymInt, data-dependent output, bool
and index outputs, a `not_implemented` second derivative, a backward that calls an op without
derivatives on the incoming gradient alone, a `Generator?`, a differentiable random
op, a `Tensor[]` return, a float32-only kernel, dtype arguments, complex inputs,
CompositeImplicitAutograd ops (one over ops differentiable once), a mutating op, a `leading`
batching rule with a shared weight).
Python kernels only: nothing is built.

- Every check passes on every sample, with an empty failures file.
- Each check fails when the op really is wrong (a wrong fake shape, a fake that fixes a size, a
  wrong formula (also one an in-place op differentiates through), a complex formula missing a
  conj(), a kernel that ignores its generator, an
  in-place kernel that writes nothing, a batching rule folding a shared weight, a float32-only
  kernel gradchecked in float64, a random op
  (with gradients or without) lacking its tag, a kernel computing in float32 under autocast, an
  op that fails under inductor only), so none passes vacuously. The wrong ops reuse the names of
  the ones before them: the compile check must not be served a graph compiled for another.
- Known failures: located errors in the failures file, and an entry that no longer fails is
  reported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from codegen import testing
from codegen.dest import md_reference
from codegen.diagnostics import UserError
from codegen.model import GradcheckSpec, SymDim
from tests import expect, scratch

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = "tests/samplelib"
PINNED = ROOT / "tests" / "samplelib" / "diagnostics"

with scratch.in_repo():
    CASES = testing.load_cases([LIBRARY])


@pytest.fixture(scope="module")
def library():
    with scratch.in_repo():
        lib = testing.load_python_library([LIBRARY])
    yield lib
    lib.close()


@pytest.fixture(scope="module")
def failures():
    with scratch.in_repo():
        return testing.load_failures([LIBRARY], CASES)


def _params():
    return [pytest.param(case, check, id=f"{case.id}-{check}")
            for case in CASES for check in testing.CHECKS if testing.applies(case, check)]


@pytest.mark.parametrize("case,check", _params())
def test_every_check_passes(library, failures, case, check):
    assert testing.run_check(case, check, failures) is None


def test_the_failures_file_is_empty(failures):
    assert failures.entries == {}, "the sample-check library must pass every check"


def test_the_library_has_an_op_of_each_kind():
    ops = {str(c.op.name.name): c for c in CASES}
    assert testing.symbolic_dims(ops["rotary"]) == ["T"]          # D goes to an int argument
    assert testing.symbolic_dims(ops["segment_max"]) == ["N", "S"]  # S is a SymInt, and ids' bound
    assert testing.has_dynamic_output(ops["nonzero_rows"].op)
    assert testing.differentiable_inputs(ops["cube_backward"].op) == ["grad_out"]
    assert testing.differentiable_outputs(ops["threshold"].op) == [True, False]
    assert testing.generator_arguments(ops["noisy"].op) == ["generator"]
    assert testing.has_gradients(ops["dropout"])                  # random, with gradients
    assert testing.differentiable_inputs(ops["square_sum"].op) == ["x"]
    assert str(ops["chunk_rows"].op.schema.returns[0].type) == "Tensor[]"
    assert ops["tanh32"].op.gradcheck.dtype == "float32"
    wide = next(c for c in CASES if c.id == "smp::tanh32[1]")
    assert testing.gradcheck_spec(wide) == GradcheckSpec("float32", 0.05, 0.01, 0.001)
    assert testing.differentiable_inputs(ops["rms_norm"].op) == ["x", "weight"]
    assert testing.is_mutating(ops["bounded_"].op)
    # In-place ops differentiate through their functional variants: the gradient check runs.
    library = [c.op for c in CASES]
    assert testing.differentiable_inputs(ops["bounded_"].op, library) == ["self"]
    assert testing.differentiable_inputs(ops["bounded_"].op) == []     # no library, no variant
    assert testing.differentiable_outputs(ops["scale_all_"].op, library) == [True]
    assert testing.has_gradients(ops["bounded_"]) and testing.has_gradients(ops["scale_all_"])
    # torch cannot functionalize these (-Wnot-functionalizable): what it refuses is skipped.
    assert testing.skipped(ops["attend"], "compile") == \
        "torch.compile cannot functionalize smp::attend (its not-functionalizable warning)"
    assert [c for c in testing.CHECKS if testing.applies(ops["attend"], c)] == ["opcheck", "vmap"]
    assert testing.opcheck_skipped(ops["attend"]) == (
        "opgen runs opcheck without test_aot_dispatch_dynamic on smp::attend, as torch cannot "
        "functionalize it (its not-functionalizable warning)")
    # export decomposes the program of a mutating op only: a view's runs
    assert [c for c in testing.CHECKS if testing.applies(ops["alias_of"], c)] == \
        ["opcheck", "gradients", "export"]
    assert testing.opcheck_skipped(ops["bounded_"]) is None
    every = {check for c in CASES for check in testing.CHECKS if testing.applies(c, check)}
    gpu_only = set() if torch.cuda.is_available() else set(testing.DEVICE_CHECKS)
    assert every == set(testing.CHECKS) - gpu_only


def test_why_devices_is_skipped_names_the_missing_kernel(tmp_path, monkeypatch):
    """An op with a CPU kernel only was said to have "no CUDA and CPU kernels"."""
    from codegen.load import load_library
    from codegen.sample_failures import why_not

    monkeypatch.chdir(tmp_path)
    (tmp_path / "dev.yaml").write_text(
        "namespace: smpdev\nops:\n"
        "  - {func: 'cpu_only(Tensor x) -> Tensor', dispatch: {CPU: cpu_only_cpu}, fake: like(x)}\n"
        "  - {func: 'cuda_only(Tensor x) -> Tensor', dispatch: {CUDA: cuda_only_cuda}, "
        "fake: like(x)}\n"
        "  - {func: 'both(Tensor x) -> Tensor', dispatch: {'CPU, CUDA': both_k}, fake: like(x)}\n"
        "  - {func: 'meta_only(Tensor x) -> Tensor', dispatch: {Meta: meta_k}}\n")
    ops = {op.name.name: op for op in load_library(["dev.yaml"]).ops}
    reasons = {name: why_not(op, None, "devices") for name, op in ops.items()}
    assert reasons == {
        "cpu_only": "the op has no CUDA kernel to compare with its CPU kernel",
        "cuda_only": "the op has no CPU kernel to compare its CUDA kernel with",
        "both": None,
        "meta_only": "the op has no CPU or CUDA kernel"}


def test_what_is_skipped_on_an_unfunctionalizable_op_fails_for_torch_s_reason(library):
    """The checks left out on an op torch cannot functionalize cannot pass, whatever its kernels:
    torch refuses the op. (Once one passes, it is to run again.)"""
    refused = "custom \\(non-ATen\\) operator whose output has alias annotations"
    skipped = {"smp::attend[0]": ["compile", "export"], "smp::attend[1]": ["compile", "export"],
               "smp::alias_of[0]": ["compile"]}
    for case in CASES:
        if case.id not in skipped:
            continue
        assert [c for c in ("compile", "export") if not testing.applies(case, c)] == \
            skipped[case.id]
        for utility in ("test_aot_dispatch_dynamic", "test_aot_dispatch_static"):
            with pytest.raises(Exception, match=refused):
                testing.check_opcheck(case, [utility])
        for check in skipped.pop(case.id):
            with pytest.raises(Exception, match=refused):
                testing.check(case, check)
    assert not skipped


def test_export_of_an_op_returning_a_dict_is_skipped(tmp_path):
    """torch.export traces a call of an op returning a Dict, but cannot save the program: export
    is skipped as compile is (-Wnon-tensor-return), and fails for torch's reason when run."""
    path = tmp_path / "dict.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: smpdict
        suppress: [non-tensor-return]
        ops:
          - func: named_rows(Tensor x) -> Dict(str, Tensor)
            dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:named_rows}
            fake: tests.samplelib.kernels:named_rows
            samples: [{x: {shape: [N=4, 3]}}]
        """))
    with scratch.loaded(testing, [str(path)]) as lib:
        (case,) = lib.cases()
        assert testing.skipped(case, "export") == (
            "torch.export cannot save a program calling smpdict::named_rows, which returns a "
            "Dict (its non-tensor-return warning)")
        assert [c for c in testing.CHECKS if testing.applies(case, c)] == ["opcheck"]
        with pytest.raises(Exception, match="Failed serializing node named_rows"):
            testing.check_export(case)


def test_export_of_an_op_returning_a_number_list_or_a_bool_among_several_is_skipped(tmp_path):
    """torch.export traces a call of an op returning an `int[]` but cannot save the program, nor
    load one whose op returns a bool among several values: export is skipped with the reason
    (-Wnon-tensor-return), compile runs, and export fails for torch's reason when run."""
    path = tmp_path / "lists.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: smplists
        suppress: [non-tensor-return]
        ops:
          - func: dims_of(Tensor x) -> int[]
            dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:dims_of}
            fake: tests.samplelib.kernels:dims_of
            samples: [{x: {shape: [N=4, 3]}}]
          - func: with_flag(Tensor x) -> (Tensor, bool)
            dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:with_flag}
            fake: tests.samplelib.kernels:with_flag
            samples: [{x: {shape: [N=4, 3]}}]
        """))
    with scratch.loaded(testing, [str(path)]) as lib:
        cases = {c.op.name.name: c for c in lib.cases()}
        assert testing.skipped(cases["dims_of"], "export") == (
            "torch.export cannot save a program calling smplists::dims_of, which returns "
            "'int[]' (its non-tensor-return warning)")
        assert testing.skipped(cases["with_flag"], "export") == (
            "torch.export cannot load a program calling smplists::with_flag, which returns a "
            "bool among several values (its non-tensor-return warning)")
        for case in cases.values():
            assert not testing.applies(case, "export") and testing.applies(case, "compile")
        with pytest.raises(Exception, match="Failed serializing node dims_of"):
            testing.check_export(cases["dims_of"])
        with pytest.raises(Exception, match="deserializing"):
            testing.check_export(cases["with_flag"])


def test_export_and_aot_dispatch_of_an_op_returning_a_str_are_skipped(tmp_path):
    """torchcodec's `get_json_metadata`-style lone str: AOTAutograd cannot compare it and an
    exported program calling it does not save, so opcheck runs without test_aot_dispatch_dynamic
    and export is skipped (-Wnon-tensor-return); both fail for torch's reason when run."""
    path = tmp_path / "str.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: smpstr
        suppress: [non-tensor-return]
        ops:
          - func: describe(Tensor x) -> str
            dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:describe}
            samples: [{x: {shape: [N=4, 3]}}]
        """))
    with scratch.loaded(testing, [str(path)]) as lib:
        (case,) = lib.cases()
        assert testing.skipped(case, "export") == (
            "torch.export cannot save a program calling smpstr::describe, which returns a str "
            "or a Device (its non-tensor-return warning)")
        assert testing.opcheck_skipped(case) == (
            "opgen runs opcheck without test_aot_dispatch_dynamic on smpstr::describe, as "
            "AOTAutograd cannot compare the str or Device it returns (its non-tensor-return "
            "warning)")
        assert [c for c in testing.CHECKS if testing.applies(case, c)] == ["opcheck"]
        testing.check_opcheck(case)
        with pytest.raises(Exception, match="No comparison pair"):
            testing.check_opcheck(case, ["test_aot_dispatch_dynamic"])
        with pytest.raises(Exception, match="deserializing"):
            testing.check_export(case)


def test_what_needs_a_fake_is_skipped_on_an_op_without_one(tmp_path):
    """torch-harmonics' split_csr_rows, never traced, registers no fake (-Wno-fake): compile,
    export and opcheck's fake-tensor utilities are skipped, and fail when run."""
    path = tmp_path / "nofake.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: smpnofake
        ops:
          - func: row_lengths(Tensor row_off) -> (int, int, int)
            dispatch: {CPU: tests.samplelib.kernels:row_lengths}
            suppress: [no-fake]
            samples: [{row_off: {values: [0, 2, 3, 7]}}]
        """))
    with scratch.loaded(testing, [str(path)]) as lib:
        (case,) = lib.cases()
        assert testing.skipped(case, "compile") == (
            "torch.compile cannot trace smpnofake::row_lengths, which has no fake kernel (its "
            "no-fake warning)")
        assert testing.opcheck_skipped(case) == (
            "opgen runs opcheck without test_faketensor, test_aot_dispatch_dynamic on "
            "smpnofake::row_lengths, which has no fake kernel (its no-fake warning)")
        assert [c for c in testing.CHECKS if testing.applies(case, c)] == ["opcheck"]
        testing.check_opcheck(case)
        for utility in ("test_faketensor", "test_aot_dispatch_dynamic"):
            with pytest.raises(Exception, match=f"{utility} failed"):
                testing.check_opcheck(case, [utility])
        with pytest.raises(Exception):
            testing.check_export(case)


def test_opcheck_leaves_out_aot_dispatch_where_the_backward_is_unfunctionalizable(tmp_path):
    """A formula calling an op torch cannot functionalize (mamba's `selective_scan_bwd(...,
    Tensor!? dz_, ...) -> Tensor[]`): AOTAutograd cannot trace the backward, so opcheck runs
    without test_aot_dispatch_*, which fail for torch's reason; the rest passes."""
    path = tmp_path / "bwd.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: smpbwd
        ops:
          - func: tripled(Tensor x) -> Tensor
            dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:tripled}
            fake: like(x)
            derivatives:
              x: smpbwd.tripled_bwd(grad, None)[0]
            samples: [{x: {shape: [3]}}]
          - func: tripled_bwd(Tensor grad, Tensor!? dx_) -> Tensor[]
            dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:tripled_bwd}
            fake: "[like(grad)]"
            suppress: [not-functionalizable]
        """))
    with scratch.loaded(testing, [str(path)]) as lib:
        case = next(c for c in lib.cases() if c.op.name.name == "tripled")
        assert testing.opcheck_skipped(case) == (
            "opgen runs opcheck without test_aot_dispatch_dynamic on smpbwd::tripled, as its "
            "backward calls smpbwd::tripled_bwd, which torch cannot functionalize (its "
            "backward-not-functionalizable warning)")
        testing.check_opcheck(case)
        assert testing.check_gradients(case)
        with pytest.raises(Exception, match="custom \\(non-ATen\\) operator whose output has "
                                            "alias annotations"):
            testing.check_opcheck(case, ["test_aot_dispatch_dynamic"])


def fp8_rows(a, a_scale):
    return (a.float() * torch.pow(2.0, a_scale.float() - 127)).sum(1).to(torch.bfloat16)


def test_opcheck_leaves_out_test_schema_on_float8_samples(tmp_path):
    """torchao's mx_fp8_bf16 takes float8 tensors: opcheck's test_schema compares each input
    before and after every call with torch.allclose, which has no float8 kernel, so opcheck
    failed on every such sample and a failures entry hid its other three utilities too."""
    path = tmp_path / "fp8.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: smpfp8
        ops:
          - func: fp8_rows(Tensor a, Tensor a_scale) -> Tensor
            dispatch: {CPU: "tests.test_sample_checks:fp8_rows"}
            fake: empty([a.size(0)], dtype=bfloat16)
            samples:
              - {a: {shape: [3, 32], dtype: float8_e4m3fn}, a_scale: {shape: [3, 1], dtype: uint8, low: 120, high: 130}}
              - {a: {shape: [3, 32]}, a_scale: {shape: [3, 1], dtype: uint8, low: 120, high: 130}}
        """))
    with scratch.loaded(testing, [str(path)]) as lib:
        fp8, plain = lib.cases()
        assert testing.opcheck_skipped(fp8) == (
            "opgen runs opcheck without test_schema on this sample, as it gives 'a' a "
            "float8_e4m3fn tensor, which test_schema's torch.allclose cannot compare")
        assert testing.opcheck_skipped(plain) is None
        assert set(testing.check_opcheck(fp8)) == {
            "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"}
        assert "test_schema" in testing.check_opcheck(plain)


def pack_rows(w):
    scales = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-6) / 7
    return torch.round(w / scales).clamp(-8, 7).to(torch.int8), scales


def packed_linear(x, packed, scales):
    return x @ (packed.to(x.dtype) * scales.to(x.dtype)).t()


PACKED = """\
    namespace: {ns}
    ops:
      - func: packed_linear(Tensor x, Tensor packed, Tensor scales) -> Tensor
        dispatch: {{CPU: "tests.test_sample_checks:packed_linear"}}
        fake: {fake}
        derivatives:
          x: grad.matmul(packed * scales)
          packed: non_differentiable
          scales: non_differentiable
        samples:
          - x: {{shape: [N=3, K=8]}}
            packed: {{output_of: pack_rows, args: {{w: {{shape: [M=5, K]}}}}, output: 0}}
            scales: {{output_of: pack_rows, args: {{w: {{shape: [M, K]}}}}, output: 1}}
      - func: pack_rows(Tensor w) -> (Tensor packed, Tensor scales)
        dispatch: {{CPU: "tests.test_sample_checks:pack_rows"}}
        fake: (empty([w.size(0), w.size(1)], dtype=int8), empty([w.size(0), 1]))
        samples:
          - w: {{shape: [4, 6]}}
    """


def test_a_sample_takes_the_outputs_of_another_op(tmp_path):
    """Packed weights and their scales come from the library's own packing op, declared further
    down the file: both from one call, as constants, in their own dtypes; the compile check
    varies the sizes they move with (M, K) and marks those dims dynamic, so it compiles once."""
    path = tmp_path / "packed.yaml"
    path.write_text(textwrap.dedent(PACKED.format(ns="smppack",
                                                  fake="empty([x.size(0), packed.size(0)])")))
    with scratch.loaded(testing, [str(path)]) as lib:
        case = next(c for c in lib.cases() if c.op.name.name == "packed_linear")
        named = testing.make_named(case.op, case.sample, seed=case.seed)
        w = named["packed"].to(torch.float32) * named["scales"]
        assert named["packed"].dtype == torch.int8 and named["scales"].shape == (5, 1)
        # One call: every row's largest magnitude is packed to 7 with that row's scale.
        assert torch.equal(named["packed"].abs().amax(dim=1), torch.full((5,), 7, dtype=torch.int8))
        assert torch.allclose(w.abs().amax(dim=1, keepdim=True), named["scales"] * 7)
        assert not any(t.requires_grad for t in named.values())
        wide = testing.make_named(case.op, case.sample, seed=case.seed, dtype=torch.float64,
                                  sizes={"N": 6, "M": 10, "K": 16})
        assert wide["scales"].dtype == torch.float64 and wide["packed"].shape == (10, 16)
        testing.check_opcheck(case)
        assert testing.check_gradients(case)
        assert testing.check_compile(case, backend="aot_eager") == 3
        testing.check_export(case)
        assert md_reference.sample_call(case.op, case.sample) == (
            "pack_rows_out1 = torch.ops.smppack.pack_rows(torch.empty(5, 8).uniform_(-1.0, 1.0))\n"
            "torch.ops.smppack.packed_linear(torch.empty(3, 8).uniform_(-1.0, 1.0), "
            "pack_rows_out1[0], pack_rows_out1[1])")


def test_a_failing_producer_is_named(tmp_path):
    text = PACKED.format(ns="smppackfail", fake="empty([x.size(0), packed.size(0)])")
    path = tmp_path / "packed.yaml"
    path.write_text(textwrap.dedent(text).replace("{shape: [M=5, K]}", "{shape: [K]}")
                    .replace("{shape: [M, K]}", "{shape: [K]}"))
    with scratch.loaded(testing, [str(path)]) as lib:
        case = next(c for c in lib.cases() if c.op.name.name == "packed_linear")
        with pytest.raises(Exception) as e:
            testing.make_named(case.op, case.sample, seed=case.seed)
        assert e.value.__notes__ == [
            "(making the sample's `output_of: smppackfail::pack_rows`, on its `args:`)"]


def test_an_output_of_without_args_shares_the_sample_s_call(tmp_path):
    """torch-harmonics' preprocessed psi gives five tensors, each an argument of its own: the
    sample writes the call's arguments once, and the other outputs name the op alone."""
    from codegen.load import load_library

    explicit = textwrap.dedent(PACKED.format(ns="smpsame", fake="empty([x.size(0), packed.size(0)])"))
    short = explicit.replace("scales: {output_of: pack_rows, args: {w: {shape: [M, K]}}, output: 1}",
                             "scales: {output_of: pack_rows, output: 1}")
    assert short != explicit
    samples = []
    for i, text in enumerate((explicit, short)):
        (tmp_path / f"{i}.yaml").write_text(text)
        lib = load_library([str(tmp_path / f"{i}.yaml")])
        samples.append(next(o for o in lib.ops if o.name.name == "packed_linear").samples[0].args)
    assert samples[0] == samples[1]


def test_a_wrong_fake_fails_on_another_op_s_outputs(tmp_path):
    path = tmp_path / "packed.yaml"
    path.write_text(textwrap.dedent(PACKED.format(ns="smppackbad",
                                                  fake="empty([x.size(0), packed.size(1)])")))
    with scratch.loaded(testing, [str(path)]) as lib:
        case = next(c for c in lib.cases() if c.op.name.name == "packed_linear")
        with pytest.raises(Exception, match="fake"):
            testing.check_compile(case, backend="aot_eager")


def group_scales(w):
    return w.abs().reshape(w.size(0), -1, 8).amax(dim=2)


def scaled_by(x, s):
    return x * s.sum()


def test_an_output_dim_that_moves_from_1_is_refused_by_name(tmp_path):
    """Group-wise scales of one group at the sample's sizes (K=8, groups of 8): the dim moves
    with K, but torch.compile specializes a size of 1, so marking it dynamic cannot work; the
    check says which output and dim, instead of a recompile blamed on the named sizes."""
    path = tmp_path / "groups.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: smpgroups
        ops:
          - func: scaled_by(Tensor x, Tensor s) -> Tensor
            dispatch: {CPU: "tests.test_sample_checks:scaled_by"}
            fake: like(x)
            samples:
              - {x: {shape: [3]}, s: {output_of: group_scales, args: {w: {shape: [M=5, K=8]}}}}
          - func: group_scales(Tensor w) -> Tensor
            dispatch: {CPU: "tests.test_sample_checks:group_scales"}
            fake: empty([w.size(0), w.size(1) // 8])
        """))
    with scratch.loaded(testing, [str(path)]) as lib:
        case = next(c for c in lib.cases() if c.op.name.name == "scaled_by")
        with pytest.raises(AssertionError, match=r"dim 1 of 's' \(the output of "
                           r"smpgroups::group_scales\) is 1, 2, 3 at the compile check's sizes"):
            testing.check_compile(case, backend="aot_eager")


def to_fp8(x):
    return x.to(torch.float8_e4m3fn)


def test_opcheck_leaves_out_test_schema_on_a_float8_op_output(tmp_path):
    """A float8 tensor another op makes shows its dtype only when the sample is made."""
    path = tmp_path / "fp8made.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: smpfp8made
        ops:
          - func: fp8_rows(Tensor a, Tensor a_scale) -> Tensor
            dispatch: {CPU: "tests.test_sample_checks:fp8_rows"}
            fake: empty([a.size(0)], dtype=bfloat16)
            samples:
              - a: {output_of: to_fp8, args: {x: {shape: [3, 32]}}}
                a_scale: {shape: [3, 1], dtype: uint8, low: 120, high: 130}
          - func: to_fp8(Tensor x) -> Tensor
            dispatch: {CPU: "tests.test_sample_checks:to_fp8"}
            fake: like(x, dtype=float8_e4m3fn)
        """))
    with scratch.loaded(testing, [str(path)]) as lib:
        case = next(c for c in lib.cases() if c.op.name.name == "fp8_rows")
        assert set(testing.check_opcheck(case)) == {
            "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"}


def test_a_named_size_tied_to_a_fixed_one_is_located(tmp_path):
    """A named size the kernel ties to a tensor given by `values` cannot vary: the compile check
    fails for torch's reason (torch's own message names neither the sample nor its sizes), with
    a note locating the sample and saying what to write."""
    path = tmp_path / "tied.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: smptied
        ops:
          - func: scatter_sum(Tensor src, Tensor index, int dim_size) -> Tensor
            dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:tied_scatter_sum}
            fake: empty([dim_size])
            samples:
              - {src: {shape: [N=5]}, index: {values: [0, 2, 2, 1, 0]}, dim_size: 4}
        """))
    with scratch.loaded(testing, [str(path)]) as lib:
        (case,) = lib.cases()
        with pytest.raises(Exception) as e:
            testing.check_compile(case, backend="aot_eager")
        assert e.value.__notes__ == [
            f"{path}:7: smptied::scatter_sum[0] ran with its named sizes varied (N=10, 2 times "
            "the sample's) and dynamic: a named size must be free to vary together with the "
            "others; where the kernel ties it to a size written as a number or to a tensor given "
            "by `values`, write it as a number (docs/FORMAT.md, Named sizes)"]


def test_named_sizes_move_together():
    case = next(c for c in CASES if c.op.name.name == "segment_max")
    assert dict(case.sample.dims) == {"N": 7, "S": 4}
    values, ids, n = case.inputs(sizes={"N": 14, "S": 8})[0]
    assert values.shape == (14, 3) and ids.shape == (14,) and n == 8
    assert int(ids.max()) < 8 and int(ids.max()) >= 4   # `high: S` ranges over the size
    ids_sample = dict(case.sample.args)["ids"]
    assert ids_sample.shape == (SymDim("N"),) and ids_sample.high == SymDim("S")


def test_torch_func_on_a_tensor_list_return(library):
    op = torch.ops.smp.chunk_rows
    x = torch.randn(6, 4, dtype=torch.float64)

    def f(x):
        return sum((o * o).sum() * (i + 1) for i, o in enumerate(op(x, 3)))

    leaf = x.clone().requires_grad_()
    expected = torch.autograd.grad(f(leaf), leaf)[0]
    torch.testing.assert_close(torch.func.grad(f)(x), expected)
    jac = torch.func.jacrev(lambda x: torch.stack(op(x, 3)))(x)
    torch.testing.assert_close(jac.reshape(24, 24), torch.eye(24, dtype=torch.float64))
    assert isinstance(op(leaf, 3), list) and all(o.requires_grad for o in op(leaf, 3))


# --------------------------------------------------------------------------------------------------
# Wrong ops fail their checks


GPU = torch.cuda.is_available()
WRONG = {
    # Checked only with a GPU: a CUDA kernel whose results are not the CPU kernel's.
    "cuda_differs": ("""\
        - func: off_by_one_on_cuda(Tensor x) -> Tensor
          dispatch: {"CPU, CUDA": tests.samplelib.kernels:off_by_one_on_cuda}
          fake: like(x)
          samples: [{x: {shape: [N=4]}}]
        """, ["devices"] if GPU else []),
    "fake_shape": ("""\
        - func: chunk_rows(Tensor x, int chunks) -> Tensor[]
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:chunk_rows}
          fake: tests.samplelib.kernels:chunk_rows_wrong_fake
          samples: [{x: {shape: [6, D=4]}, chunks: 3}]
        """, ["opcheck", "compile", "export"]),
    "fake_rule_shape": ("""\
        - func: rotary(Tensor x, Tensor cos, Tensor sin, int head_size) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:rotary}
          fake: empty([x.size(0), x.size(1)])
          samples:
            - {x: {shape: [T=5, 3, D=8]}, cos: {shape: [T, D]}, sin: {shape: [T, D]}, head_size: D}
        """, ["opcheck", "compile", "export"]),
    # Right at the sample's sizes: only varying the named size shows the fake fixes it.
    "fake_fixes_a_size": ("""\
        - func: segment_max(Tensor values, Tensor ids, SymInt num_segments) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:segment_max}
          fake: empty([4, *values.shape[1:]])
          samples:
            - {values: {shape: [N=7, 3]}, ids: {shape: [N], dtype: int64, high: S},
               num_segments: S=4}
        """, ["compile"]),
    "formula": ("""\
        - func: tanh32(Tensor x) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:tanh32}
          fake: like(x)
          derivatives: {x: grad * (1 + result * result)}
          gradcheck: {dtype: float32, eps: 0.001, atol: 0.01, rtol: 0.01}
          samples: [{x: {shape: [N=4, 3]}}]
        """, ["gradients"]),
    "formula_of_a_list_return": ("""\
        - func: chunk_rows(Tensor x, int chunks) -> Tensor[]
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:chunk_rows}
          fake: tests.samplelib.kernels:chunk_rows_fake
          derivatives: {x: 'torch.cat([grad[0], grad[0], grad[2]], 0)'}
          samples: [{x: {shape: [6, D=4]}, chunks: 3}]
        """, ["gradients"]),
    "float32_kernel_in_float64": ("""\
        - func: tanh32(Tensor x) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:tanh32}
          fake: like(x)
          derivatives: {x: grad * (1 - result * result)}
          samples: [{x: {shape: [N=4, 3]}}]
        """, ["gradients"]),
    "ignores_generator": ("""\
        - func: noisy(Tensor x, float p, Generator? generator=None) -> Tensor
          tags: [nondeterministic_seeded]
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:noisy_ignores_generator}
          fake: like(x)
          samples: [{x: {shape: [N=6, 5]}, p: 0.5}]
        """, ["seeded"]),
    # Random without saying so: only the checks that reseed for a declared tag can compare runs.
    "random_without_the_tag": ("""\
        - func: noisy(Tensor x, float p, Generator? generator=None) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:noisy}
          fake: like(x)
          samples: [{x: {shape: [N=6, 5]}, p: 0.5}]
        """, ["compile", "export"]),
    # Random and differentiable without saying so: gradcheck's calls draw different masks.
    "random_gradients_without_the_tag": ("""\
        - func: dropout(Tensor x, float p, Generator? generator=None) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:noisy}
          fake: like(x)
          derivatives: {x: grad * (result != 0) / (1 - p)}
          samples: [{x: {shape: [N=6, 5]}, p: 0.5}]
        """, ["gradients", "compile", "export"]),
    # Fails under inductor only (a user-written `out` tag: Note [The out tag] in codegen/tags.py),
    # which the compile check uses by default.
    "fails_under_inductor_only": ("""\
        - func: shrink(Tensor self, float lambd=0.5) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:shrink}
          fake: like(self)
          samples: [{self: {shape: [N=6, 5]}}]
        - func: shrink.out(Tensor self, float lambd=0.5, *, Tensor(a!) out) -> Tensor(a!)
          tags: [out]
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:shrink_out}
          fake: like(self)
        """, ["compile"]),
    "writes_nothing": ("""\
        - func: bounded(Tensor self, float lo, float hi) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:bounded}
          fake: like(self)
        - func: bounded_(Tensor(a!) self, float lo, float hi) -> Tensor(a!)
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:bounded}
          samples:
            - {self: {shape: [N=5, 2], low: -2.0, high: 2.0}, lo: -1.0, hi: 1.0}
        """, ["opcheck", "compile", "export"]),
    # An in-place op differentiates through its functional variant, here with a wrong formula.
    "inplace_through_a_wrong_formula": ("""\
        - func: bounded(Tensor self, float lo, float hi) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:bounded}
          fake: like(self)
          derivatives: {self: "grad * torch.logical_or(self >= lo, self <= hi)"}
        - func: bounded_(Tensor(a!) self, float lo, float hi) -> Tensor(a!)
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:bounded_}
          samples:
            - {self: {shape: [N=5, 2], low: -2.0, high: 2.0}, lo: -1.0, hi: 1.0}
        """, ["gradients"]),
    "computes_in_float32_under_autocast": ("""\
        - func: row_scale(Tensor x, Tensor weight) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:row_scale_in_float32}
          fake: broadcast(x, weight)
          autocast: {device_type: cpu, cast_inputs: bfloat16}
          samples: [{x: {shape: [N=4, H=3]}, weight: {shape: [H]}}]
        """, ["autocast"]),
    "computes_in_float32_under_autocast_to_its_dtype": ("""\
        - func: row_scale(Tensor x, Tensor weight) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:row_scale_in_float32}
          fake: broadcast(x, weight)
          autocast: {device_type: cpu, cast_inputs: autocast_dtype}
          samples: [{x: {shape: [N=4, H=3]}, weight: {shape: [H]}}]
        """, ["autocast"]),
    # The gradient of a complex product without the conjugate (PyTorch's convention needs it).
    "complex_formula_without_conj": ("""\
        - func: complex_scale(Tensor z, Tensor s) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:complex_scale}
          fake: broadcast(z, s)
          derivatives: {z: "unbroadcast(grad * s, z)", s: "unbroadcast(grad * z.conj(), s)"}
          samples: [{z: {shape: [N=3, 2], dtype: complex64}, s: {shape: [2], dtype: complex64}}]
        """, ["gradients"]),
    "rule_needs_the_first_operand_batched": ("""\
        - func: row_scale(Tensor x, Tensor weight) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:row_scale}
          fake: broadcast(x, weight)
          vmap: tests.samplelib.kernels:row_scale_vmap_needs_x_batched
          samples: [{x: {shape: [N=4, H=3]}, weight: {shape: [H]}}]
        """, ["vmap"]),
    "folds_a_shared_weight": ("""\
        - func: row_scale(Tensor x, Tensor weight) -> Tensor
          dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:row_scale}
          fake: broadcast(x, weight)
          vmap: leading(x, weight)
          samples: [{x: {shape: [N=4, H=3]}, weight: {shape: [H]}}]
        """, ["vmap"]),
}


def _wrong_library(tmp_path: Path, name: str) -> tuple[testing.PythonLibrary, list]:
    path = tmp_path / f"{name}.yaml"
    path.write_text("namespace: smpbad\nops:\n" + textwrap.indent(
        textwrap.dedent(WRONG[name][0]), "  "))
    with scratch.in_repo():
        lib = testing.load_python_library([str(path)])
    return lib, [c for c in lib.cases()]


@pytest.mark.parametrize("name", list(WRONG))
def test_each_check_fails_on_a_wrong_op(tmp_path, name):
    lib, cases = _wrong_library(tmp_path, name)
    try:
        (case,) = cases
        failing = WRONG[name][1]
        for check in testing.CHECKS:
            if not testing.applies(case, check):
                assert check not in failing
                continue
            if check in failing:
                with pytest.raises(Exception):  # noqa: B017  (AssertionError or torch's error)
                    testing.check(case, check)
            else:
                testing.check(case, check)      # the op is right otherwise
    finally:
        lib.close()


def test_wrong_ops_fail_for_the_stated_reason(tmp_path):
    lib, (case,) = _wrong_library(tmp_path, "ignores_generator")
    try:
        with pytest.raises(AssertionError, match="global generator"):
            testing.check_seeded(case)
    finally:
        lib.close()
    lib, (case,) = _wrong_library(tmp_path, "writes_nothing")
    try:
        with pytest.raises(AssertionError, match="mutated arguments"):
            testing.check_compile(case)
    finally:
        lib.close()
    lib, (case,) = _wrong_library(tmp_path, "fake_fixes_a_size")
    try:
        testing.check_opcheck(case)                 # at the sample's own sizes, all is well
        with pytest.raises(Exception, match="size|shape"):
            testing.check_compile(case)
    finally:
        lib.close()


ACCUMULATE = """\
namespace: smpwrite
ops:
  - func: accumulate(Tensor(a!) buf, Tensor x) -> ()
    dispatch: {{CompositeExplicitAutograd: tests.samplelib.kernels:accumulate}}
    vmap: tests.samplelib.kernels:{rule}
    samples: [{{buf: {{shape: [N=4, 3]}}, x: {{shape: [N, 3]}}}}]
"""


def test_the_vmap_check_of_an_op_that_writes_and_returns_nothing(tmp_path):
    """vmap of such an op returns None: the check compares what it wrote (it crashed stacking the
    Nones), and leaves out configurations where what it writes is unbatched."""
    path = tmp_path / "ops.yaml"
    path.write_text(ACCUMULATE.format(rule="accumulate_vmap"))
    with scratch.loaded(testing, [str(path)]) as lib:
        (case,) = lib.cases()
        assert testing.check_vmap(case) == 2    # all batched at dim 0; buf alone at dim -1
    path.write_text(ACCUMULATE.format(rule="accumulate_vmap_writes_a_copy"))
    with scratch.loaded(testing, [str(path)]) as lib:
        (case,) = lib.cases()
        with pytest.raises(AssertionError, match=r"smpwrite::accumulate\[0\] under vmap, "
                           r"in_dims=\(-1, None\): 'buf' written"):
            testing.check_vmap(case)


SPLIT_TOTAL = """\
namespace: smpnested
ops:
  - func: split_total(Tensor x, SymInt[] sizes) -> (Tensor[], Tensor)
    dispatch: {{CPU: tests.samplelib.kernels:split_total}}
    fake: '([empty([s, x.size(1)]) for s in sizes], empty([x.size(1)]))'
    vmap: tests.samplelib.kernels:{rule}
    samples: [{{x: {{shape: [4, 3]}}, sizes: [1, 3]}}]
"""


def test_the_vmap_check_compares_a_list_inside_a_tuple(tmp_path):
    """An op returning `(Tensor[], Tensor)`: the check stacks the loop's outputs element by
    element (it crashed stacking the lists), and fails on a rule wrong in the list alone."""
    path = tmp_path / "ops.yaml"
    path.write_text(SPLIT_TOTAL.format(rule="split_total_vmap"))
    with scratch.loaded(testing, [str(path)]) as lib:
        (case,) = lib.cases()
        assert testing.check_vmap(case) == 2    # batched at dim 0, then at dim -1
    path.write_text(SPLIT_TOTAL.format(rule="split_total_vmap_shifts_a_part"))
    with scratch.loaded(testing, [str(path)]) as lib:
        (case,) = lib.cases()
        with pytest.raises(AssertionError, match=r"(?s)smpnested::split_total\[0\] under vmap, "
                           r"in_dims=\(0, None\): .*occurred for item \[0\]\[0\]"):
            testing.check_vmap(case)


def fp8_scaled(a, scale):
    if a.dtype != torch.float8_e4m3fn:
        raise TypeError(f"a must be float8_e4m3fn, got {a.dtype}")
    return a.to(scale.dtype) * scale


def test_float8_samples_keep_their_dtype_in_the_gradient_check(tmp_path):
    """TensorRT-LLM's dequantize_e4m3_per_tensor takes float8 values and differentiates its
    scale: the gradient check made a float8 sample, and a float8 op output, float64, which a
    kernel for float8 refuses (gradcheck cannot step a float8 input anyway)."""
    path = tmp_path / "fp8grad.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: smpfp8grad
        ops:
          - func: fp8_scaled(Tensor a, Tensor scale) -> Tensor
            dispatch: {CPU: "tests.test_sample_checks:fp8_scaled"}
            fake: like(a, dtype=scale.dtype)
            derivatives:
              a: non_differentiable
              scale: (grad * a.to(grad.dtype)).sum_to_size(scale.shape)
            samples:
              given: {a: {shape: [3, 4], dtype: float8_e4m3fn}, scale: {values: [[0.5]]}}
              made:
                a: {output_of: to_fp8, args: {x: {shape: [3, 4]}}}
                scale: {values: [[2.0]]}
          - func: to_fp8(Tensor x) -> Tensor
            dispatch: {CPU: "tests.test_sample_checks:to_fp8"}
            fake: like(x, dtype=float8_e4m3fn)
        """))
    with scratch.loaded(testing, [str(path)]) as lib:
        cases = [c for c in lib.cases() if c.op.name.name == "fp8_scaled"]
        assert [c.id for c in cases] == ["smpfp8grad::fp8_scaled[given]",
                                         "smpfp8grad::fp8_scaled[made]"]
        for case in cases:
            named = testing.make_named(case.op, case.sample, dtype=torch.float64)
            assert (named["a"].dtype, named["scale"].dtype) == (torch.float8_e4m3fn, torch.float64)
            assert testing.check_gradients(case)


def test_complex_samples_take_the_gradient_checks_precision():
    """A complex64 sample is gradchecked in complex128 under the default float64 (at float64's
    tolerances a correct complex64 op failed on rounding), in complex64 under float32."""
    case = next(c for c in CASES if c.id == "smp::complex_scale[0]")
    for dtype, want in ((torch.float64, torch.complex128), (torch.float32, torch.complex64),
                        (torch.complex128, torch.complex128)):
        named = testing.make_named(case.op, case.sample, dtype=dtype)
        assert {v.dtype for v in named.values()} == {want}
    z = testing.make_named(case.op, case.sample)["z"]
    assert z.dtype == torch.complex64
    assert (z.imag != 0).all() and (z.imag >= -1).all() and (z.imag < 1).all()  # not real only


def test_the_compile_check_uses_inductor(tmp_path):
    assert testing.default_backend() == "inductor"      # g++ is here
    lib, (case,) = _wrong_library(tmp_path, "fails_under_inductor_only")
    try:
        assert testing.check_compile(case, backend="aot_eager") == len(testing.COMPILE_SCALES)
        with pytest.raises(Exception, match="smpbad.shrink"):
            testing.check_compile(case)
    finally:
        lib.close()


def test_a_composite_expects_the_second_order_error_of_what_it_calls(library):
    """square_sum decomposes into square, whose backward calls square_backward (no derivatives):
    it is gradchecked once, and differentiating it twice must raise square's error."""
    case = next(c for c in CASES if c.id == "smp::square_sum[0]")
    assert testing.check_gradients(case)
    with pytest.raises(RuntimeError, match=r"smp::square's backward calls smp::square_backward, "
                       r"which has no derivatives; .* to differentiate twice"):
        testing.check_gradients(case, second_order=True)
    # cube_mean decomposes into cube, whose second derivative is not implemented.
    case = next(c for c in CASES if c.id == "smp::cube_mean[0]")
    assert testing.check_gradients(case)
    x = case.inputs(dtype=torch.float64)[0][0].requires_grad_()
    with pytest.raises(NotImplementedError, match="smp::cube_backward is not implemented"):
        torch.autograd.gradgradcheck(torch.ops.smp.cube_mean, (x,))


def test_requires_grad_false_keeps_an_input_out_of_the_gradient_checks(tmp_path):
    """A tensor sample with `requires_grad: false` does not require grad in opcheck, and a sample
    marking every differentiable input so has no gradients check: here the backward raises on
    that sample, so both checks would fail if the key were ignored."""
    path = tmp_path / "ops.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: smpbad
        ops:
          - func: bounded(Tensor self, float lo, float hi) -> Tensor
            dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:bounded}
            fake: like(self)
            derivatives:
              self: 'grad * (self >= lo) * (self <= hi) if lo <= hi else not_implemented("empty")'
            samples:
              empty: {self: {shape: [4], requires_grad: false}, lo: 1.0, hi: -1.0}
              range: {self: {shape: [4]}, lo: -0.5, hi: 0.5}
        """))
    with scratch.loaded(testing, [str(path)]) as lib:
        empty, in_range = lib.cases()
        assert empty.sample.args[0][1].requires_grad is False
        assert not testing.applies(empty, "gradients")
        assert testing.check_gradients(empty) is False
        testing.check_opcheck(empty)
        # Unmarked, the same input requires grad: the checks do differentiate it.
        assert in_range.sample.args[0][1].requires_grad is None
        assert testing.applies(in_range, "gradients") and testing.check_gradients(in_range)
        testing.check_opcheck(in_range)


# --------------------------------------------------------------------------------------------------
# Known failures


def test_a_known_failure_is_reported_once_it_passes(tmp_path, library):
    (tmp_path / "sample_failures.yaml").write_text(
        "smp::cube[0]:\n  compile: 'made up, to see it reported'\n")
    case = next(c for c in CASES if c.id == "smp::cube[0]")
    known = testing.load_failures([str(tmp_path)], CASES)
    assert known.reason("smp::cube[0]", "compile") == "made up, to see it reported"
    with pytest.raises(testing.NoLongerFails,
                       match=r"sample_failures.yaml:2:3: smp::cube\[0\] passes its compile check"):
        testing.run_check(case, "compile", known)
    assert testing.run_check(case, "export", known) is None


def test_an_entry_for_a_check_torch_cannot_pass_is_not_needed(tmp_path, library):
    """An entry for a check skipped on the op (torch cannot functionalize it, or put its call in
    a graph) is left out with a located warning; an opcheck entry, the check now run without
    the utilities torch refuses, is reported once it passes, saying why."""
    (tmp_path / "sample_failures.yaml").write_text(textwrap.dedent("""\
        smp::attend[0]:
          compile: torch cannot functionalize it
          export: torch cannot functionalize it
          opcheck: test_aot_dispatch_dynamic fails
        smp::alias_of[0]: {compile: torch cannot functionalize a view}
        """))
    with pytest.warns(testing.SampleFailuresWarning) as caught:
        known = testing.load_failures([str(tmp_path)], CASES)
    (warning,) = caught
    text = str(warning.message).replace(str(tmp_path), "<tmp>") + "\n"
    expect.check_file(PINNED / "failures_file_not_needed.expected", text)
    assert known.entries == {"smp::attend[0]": {"opcheck": "test_aot_dispatch_dynamic fails"}}
    case = next(c for c in CASES if c.id == "smp::attend[0]")
    with pytest.raises(testing.NoLongerFails, match=(
            r"sample_failures.yaml:4:3: smp::attend\[0\] passes its opcheck check now \(opgen "
            r"runs opcheck without test_aot_dispatch_dynamic on smp::attend, as torch cannot "
            r"functionalize it \(its not-functionalizable warning\)\), but it is listed")):
        testing.run_check(case, "opcheck", known)


def test_check_warns_of_entries_for_checks_torch_cannot_pass(tmp_path, monkeypatch, capsys):
    """`check` says the same of the failures file, and passes."""
    from codegen.__main__ import main

    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "ops.yaml").write_text(textwrap.dedent("""\
        namespace: ex
        suppress: [not-functionalizable, non-tensor-return]
        ops:
          - func: fwd(Tensor q, Tensor(a!)? out=None) -> (Tensor(a!), Tensor)
            dispatch: {CPU: fwd_cpu}
            fake: (like(q), empty([q.size(0)]))
            samples: [{q: {shape: [3, 4]}}]
          - func: rows(Tensor x) -> int
            dispatch: {CPU: rows_cpu}
            fake: x.size(0)
            samples: [{x: {shape: [3, 4]}}]
        """))
    (tmp_path / "ops" / "sample_failures.yaml").write_text(textwrap.dedent("""\
        ex::fwd[0]: {compile: not functionalizable, export: not functionalizable}
        ex::rows[0]: {compile: returns an int}
        """))
    monkeypatch.chdir(tmp_path)
    assert main(["check", "ops"]) == 0
    expect.check_file(PINNED / "failures_file_check_not_needed.expected",
                      capsys.readouterr().err)


def test_a_known_failure_that_fails_gives_its_reason(tmp_path):
    lib, (case,) = _wrong_library(tmp_path, "ignores_generator")
    try:
        (tmp_path / "sample_failures.yaml").write_text(
            "smpbad::noisy[0]: {seeded: the kernel draws from the global generator}\n")
        known = testing.load_failures([str(tmp_path)], [case])
        assert testing.run_check(case, "seeded", known) == \
            "the kernel draws from the global generator"
    finally:
        lib.close()


def test_failures_file_errors_are_located(tmp_path):
    folder = tmp_path / "lib"
    folder.mkdir()
    (folder / "sample_failures.yaml").write_text(textwrap.dedent("""\
        smp::cube[0]: {compile: ''}
        smp::cub[0]: {compile: typo in the op name}
        smp::cube_backward[0]: {compiled: typo in the check, vmap: cube_backward has no vmap}
        smp::noisy[0]: {seeded: 3}
        smp::cube_mean[0]: {gradcheck: torch's name for what the gradients check runs}
        """))
    with pytest.raises(UserError) as e:
        testing.load_failures([str(folder)], CASES)
    text = e.value.diags.render().replace(str(tmp_path), "<tmp>") + "\n"
    expect.check_file(PINNED / "failures_file.expected", text)


def test_check_validates_the_failures_file(tmp_path, monkeypatch, capsys):
    """`check` reads the failures file of each op directory it checks, as the sample checks
    would, and reports its mistakes with the op files' (exit 1)."""
    from codegen.__main__ import main

    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "ops.yaml").write_text(textwrap.dedent("""\
        namespace: ex
        ops:
          - func: scale(Tensor x, float s) -> Tensor
            derivatives: {x: grad * s}
            samples:
              - {x: {shape: [3]}, s: 2.0}
              - {x: {shape: [3], requires_grad: false}, s: 2.0}
        """))
    (tmp_path / "ops" / "sample_failures.yaml").write_text(textwrap.dedent("""\
        ex::scale[0]: {gradcheck: a misspelt check}
        ex::scale[1]: {gradients: its only input does not require grad}
        ex::scal[0]: {compile: a misspelt op}
        """))
    monkeypatch.chdir(tmp_path)
    assert main(["check", "ops"]) == 1
    out, err = capsys.readouterr()
    expect.check_file(PINNED / "failures_file_check.expected", err)
    (tmp_path / "ops" / "sample_failures.yaml").write_text(
        "ex::scale[0]: {gradients: a reason}\n")
    assert main(["check", "ops"]) == 0


def test_check_validates_the_failures_file_of_op_files_named_one_by_one(tmp_path, monkeypatch,
                                                                        capsys):
    """A project naming every op file of a directory (`schemas = ["ops/a.yaml", "ops/b.yaml"]`)
    loads the directory whole: `check` reads its failures file as a listed directory's. With
    one of them left out, an entry may name its ops, so the file is not read."""
    from codegen.__main__ import main

    (tmp_path / "ops").mkdir()
    for name in ("a", "b"):
        (tmp_path / "ops" / f"{name}.yaml").write_text(textwrap.dedent(f"""\
            namespace: ex
            ops:
              - func: {name}(Tensor x) -> Tensor
                samples: [{{x: {{shape: [3]}}}}]
            """))
    (tmp_path / "ops" / "sample_failures.yaml").write_text("ex::bb[0]: {compile: a misspelt op}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "ops/a.yaml", "ops/b.yaml"]) == 1
    assert [line for line in capsys.readouterr().err.splitlines() if "error:" in line] == [
        "ops/sample_failures.yaml:1:1: error: no sample 'ex::bb[0]' in the op files"]
    assert main(["check", "ops/a.yaml"]) == 0


def test_a_failures_file_error_does_not_hide_the_op_files(tmp_path, monkeypatch, capsys):
    """A mistake in the failures file is reported beside the op files' mistakes found when the
    library is rendered (a formula calling a library op with a misspelt keyword), not instead."""
    from codegen.__main__ import main

    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "ops.yaml").write_text(textwrap.dedent("""\
        namespace: ex
        ops:
          - func: scale(Tensor x, float s) -> Tensor
            derivatives:
              x: ex.scale_back(grad, scal=s)
            samples: [{x: {shape: [3]}, s: 2.0}]
          - func: scale_back(Tensor g, float s) -> Tensor
        """))
    (tmp_path / "ops" / "sample_failures.yaml").write_text("ex::scal[0]: {compile: a typo}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "ops"]) == 1
    assert [line for line in capsys.readouterr().err.splitlines() if "error:" in line] == [
        "ops/ops.yaml:5:10: error: ex::scale_back is missing argument 's'",
        "ops/ops.yaml:5:30: error: ex::scale_back has no argument 'scal'",
        "ops/sample_failures.yaml:1:1: error: no sample 'ex::scal[0]' in the op files"]


def test_a_gpu_check_may_be_listed_on_a_machine_without_one(tmp_path):
    """Entries are checked as if a GPU were present: a file written where the CUDA checks run
    stays valid where they do not (they are skipped there)."""
    lib, (case,) = _wrong_library(tmp_path, "cuda_differs")
    try:
        (tmp_path / "sample_failures.yaml").write_text(
            "smpbad::off_by_one_on_cuda[0]: {devices: its CUDA kernel adds one}\n")
        known = testing.load_failures([str(tmp_path)], [case])
        assert known.reason(case.id, "devices") == "its CUDA kernel adds one"
        assert testing.applies(case, "devices") == torch.cuda.is_available()
    finally:
        lib.close()


def test_a_broken_failures_file_fails_pytest_without_a_traceback(tmp_path):
    """Under pytest, the located diagnostics alone: no traceback into codegen."""
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "ops.yaml").write_text(
        "namespace: ex\nops:\n  - func: f(Tensor x) -> Tensor\n    samples: [{x: {shape: [2]}}]\n")
    (tmp_path / "ops" / "sample_failures.yaml").write_text("ex::f[0]: {gradcheck: why}\n")
    (tmp_path / "test_lib.py").write_text(textwrap.dedent("""\
        from codegen import testing

        CASES = testing.load_cases(["ops"])
        FAILURES = testing.load_failures(["ops"], CASES)


        def test_nothing():
            pass
        """))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "test_lib.py"], cwd=tmp_path, env=scratch.env(), text=True,
                            capture_output=True, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "ops/sample_failures.yaml:1:12: error: unknown check 'gradcheck' in the known " \
        "failures of ex::f[0]" in result.stdout
    assert "hint: did you mean 'gradients'?" in result.stdout
    assert "Traceback" not in result.stdout and "testing.py" not in result.stdout, result.stdout


def test_the_failures_file_is_not_an_op_file(tmp_path):
    from codegen.load import load_library

    (tmp_path / "ops.yaml").write_text("- func: ex::f(Tensor x) -> Tensor\n")
    (tmp_path / "sample_failures.yaml").write_text("{}\n")
    assert [str(op.name) for op in load_library([str(tmp_path)]).ops] == ["ex::f"]


# --------------------------------------------------------------------------------------------------
# Python-only op files without anything built; check-time messages


def test_python_only_op_files_need_nothing_built(tmp_path):
    """No built library under OPGEN_ROOT: `import runtime` refuses, codegen.testing works."""
    code = textwrap.dedent(f"""\
        import os
        os.chdir({str(ROOT)!r})
        from codegen import testing
        lib = testing.load_python_library([{LIBRARY!r}])
        case = next(c for c in lib.cases() if c.id == "smp::cube[0]")
        assert testing.check_gradients(case)
        testing.check_opcheck(case)
        try:
            import runtime
        except Exception as e:
            print("runtime:", type(e).__name__)
        """)
    result = scratch.python(tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert "runtime: LibraryError" in result.stdout


def test_several_tensor_list_returns_warn_that_torch_func_cannot(tmp_path, capsys, monkeypatch):
    from codegen.__main__ import main as cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.yaml").write_text(textwrap.dedent("""\
        - func: ex::halves(Tensor x) -> (Tensor[] a, Tensor[] b)
          dispatch: {CPU: halves_cpu}
          fake: ex_fakes:halves
          derivatives:
            x: torch.cat(grad_a) + torch.cat(grad_b)
        """))
    (tmp_path / "ex_fakes.py").write_text("def halves(x):\n    return [x], [x]\n")
    assert cli(["check", "ops.yaml"]) == 0
    expect.check_file(PINNED / "several_list_returns.expected", capsys.readouterr().err)


def test_python_library_stays_loaded_until_closed(tmp_path) -> None:
    """`load_python_library([...])` as a statement, its result dropped (the README's use): the ops
    stay defined after a garbage collection, and close() still removes them."""
    (tmp_path / "keepk.py").write_text("def twice(x):\n    return x * 2\n", encoding="utf-8")
    for ns in ("keepns", "closens"):
        (tmp_path / f"{ns}.yaml").write_text(
            f"namespace: {ns}\nops:\n  - func: twice(Tensor x) -> Tensor\n"
            "    dispatch: {CompositeExplicitAutograd: keepk:twice}\n    fake: like(x)\n",
            encoding="utf-8")
    code = ("import gc, torch\nfrom codegen import testing\n"
            "testing.load_python_library(['keepns.yaml'])\ngc.collect()\n"
            "print(torch.ops.keepns.twice(torch.ones(2)).tolist())\n"
            "lib = testing.load_python_library(['closens.yaml'])\nlib.close()\n"
            "del lib\ngc.collect()\nprint(hasattr(torch.ops.closens, 'twice'))\n"
            "testing.load_python_library(['closens.yaml'])\n"
            "print(torch.ops.closens.twice(torch.ones(1)).tolist())\n")
    env = scratch.env()
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert (r.returncode, r.stdout) == (0, "[2.0, 2.0]\nFalse\n[2.0]\n"), r.stderr


def test_op_paths_may_be_one_path_or_several():
    """A lone string was taken as a list of one-letter paths ('directory holds no op files' for
    '.' and '/', 'no such file' for each letter); a nested list was a bare TypeError of os.stat."""
    with scratch.in_repo():
        every = [c.id for c in testing.load_cases([LIBRARY])]
        assert [c.id for c in testing.load_cases(LIBRARY)] == every
        assert [c.id for c in testing.load_cases(Path(LIBRARY))] == every
        assert testing.load_failures(LIBRARY).entries == testing.load_failures([LIBRARY]).entries
        for bad, what in (([[LIBRARY]], "one of them is list: ['tests/samplelib']"),
                          ([3], "one of them is int: 3"), (None, "not NoneType")):
            with pytest.raises(TypeError) as e:
                testing.load_cases(bad)
            assert str(e.value).startswith("load_cases() takes op file or directory paths")
            assert str(e.value).endswith(what)
