"""A library's known sample-check failures, `sample_failures.yaml` beside its op files
(docs/FORMAT.md, "Known failures"): reading and validating them, and which checks a sample has.

Imports no torch: `check` validates the files with the op files (codegen.__main__), and
codegen.testing reads them to run the checks. Which checks apply is decided here as if a GPU were
present (a file written on a machine with one stays valid on one without);
`codegen.testing.applies` adds whether this process can run the GPU checks.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterable

from codegen.contract import (differentiable_inputs, differentiated_through, torch_refuses,
                              unfunctionalizable_in_backward, untraceable)
from codegen.diagnostics import Diagnostics, suggest
from codegen.enums import is_floating
from codegen.load import FAILURES_FILE
from codegen.model import (BaseTy, BaseType, DispatchKey, Op, OpFile, OpLibrary, Sample,
                           TensorSample, holds_str_or_device, is_tensor_like, strip_optional)
from codegen.tags import unfunctionalizable
from codegen.yaml_source import Scalar, YamlFile, short

CHECKS = ("opcheck", "gradients", "compile", "export", "seeded", "vmap", "autocast", "devices",
          "cudagraph")
# The checks that need a GPU: they apply only where torch.cuda.is_available().
DEVICE_CHECKS = ("devices", "cudagraph")
# The utilities of torch.library.opcheck that the opcheck check runs (torch's defaults).
OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor",
                 "test_aot_dispatch_dynamic")
# Those that trace the op through AOTAutograd, which functionalizes it.
FUNCTIONALIZING_UTILS = ("test_aot_dispatch_dynamic", "test_aot_dispatch_static")
# Those that run the op on fake tensors.
FAKE_UTILS = ("test_faketensor", "test_aot_dispatch_dynamic", "test_aot_dispatch_static")

# What each check runs, for the hint on a name that is part of one (`gradcheck` -> gradients).
_RUNS = {
    "opcheck": "torch.library.opcheck (test_schema, test_autograd_registration, test_faketensor, "
               "test_aot_dispatch_dynamic)",
    "gradients": "gradcheck and gradgradcheck",
    "compile": "torch.compile",
    "export": "torch.export",
    "seeded": "the seeding of random ops",
    "vmap": "torch.vmap against a loop",
    "autocast": "torch.autocast",
    "devices": "CUDA against the CPU",
    "cudagraph": "CUDA-graph capture and replay",
}
# Names a user may write for a check: what torch calls what the check runs.
_ALIASES = {
    "gradcheck": "gradients", "gradgradcheck": "gradients", "grad": "gradients",
    "grads": "gradients", "autograd": "gradients", "backward": "gradients",
    "test_schema": "opcheck", "test_autograd_registration": "opcheck",
    "test_faketensor": "opcheck", "test_aot_dispatch_dynamic": "opcheck", "fake": "opcheck",
    "faketensor": "opcheck", "torch.compile": "compile", "inductor": "compile",
    "dynamo": "compile", "torch.export": "export", "aoti": "export", "seed": "seeded",
    "generator": "seeded", "random": "seeded", "batching": "vmap", "amp": "autocast",
    "cuda": "devices", "cuda_graph": "cudagraph", "cudagraphs": "cudagraph",
}


def check_hint(name: str) -> str | None:
    """The did-you-mean for an unknown check name: the check that runs what the name says
    (`gradcheck` -> gradients), else the closest spelling."""
    key = name.strip().lower().replace("-", "_")
    target = _ALIASES.get(key) or _ALIASES.get(key.removeprefix("torch."))
    if target is not None:
        return f"did you mean '{target}'? (the check that runs {_RUNS[target]})"
    return suggest(key, CHECKS)


# --------------------------------------------------------------------------------------------------
# Which checks a sample has


def sample_id(op: Op, sample: Sample, index: int) -> str:
    """`ns::op[name]`, or `ns::op[index]` for a sample without a name: how tests and the failures
    file name a sample."""
    return f"{op.name}[{sample.name if sample.name is not None else index}]"


def sample_ids(ops: Iterable[Op]) -> dict[str, tuple[Op, Sample]]:
    return {sample_id(op, s, i): (op, s) for op in ops for i, s in enumerate(op.samples)}


def differentiable_outputs(op: Op, library: Iterable[Op] = ()) -> list[bool]:
    """One flag per return: `output_differentiability`, else whether it is a Tensor. An in-place
    op of `library` returning nothing that differentiates through its functional variant
    (`_foreach_mul_(Tensor(a!)[] self, Scalar s) -> ()`): one per argument it writes, which are
    its outputs (`written_outputs`)."""
    from codegen.formulas import Derivatives

    d = op.derivatives
    if isinstance(d, Derivatives):
        return list(d.output_differentiability)
    if written_outputs(op, library):
        return [True] * len(op.schema.mutable_arguments)
    return [is_tensor_like(r.type) for r in op.schema.returns]


def written_outputs(op: Op, library: Iterable[Op] = ()) -> bool:
    """Whether the gradient check takes what `op` writes for its outputs: it returns nothing
    and differentiates through its functional variant."""
    return not op.schema.returns and differentiated_through(op, library) is not None


def _floating_sample(v: Any) -> bool:
    """A floating (or complex) tensor sample, or a list holding one, that may require grad (the
    sample does not say `requires_grad: false`)."""
    if isinstance(v, TensorSample):
        return is_floating(v.dtype) and v.requires_grad is not False
    return isinstance(v, tuple) and any(_floating_sample(x) for x in v)


def sample_has_gradients(op: Op, sample: Sample, library: Iterable[Op] = ()) -> bool:
    """Whether the gradient check has something to check: a floating (or complex) tensor given
    for a differentiable input, not marked `requires_grad: false`, and a differentiable output.
    `library`: the ops of its library (an in-place op differentiates through another)."""
    diff = set(differentiable_inputs(op, library))
    return any(differentiable_outputs(op, library)) and \
        any(name in diff and _floating_sample(v) for name, v in sample.args)


def has_dynamic_output(op: Op) -> bool:
    """Whether an output's size depends on data (a `dynamic()` in its fake rule, or a tag)."""
    from codegen.shape import FakeRule

    if "dynamic_output_shape" in op.tags or "data_dependent_output" in op.tags:
        return True
    return isinstance(op.fake, FakeRule) and op.fake.uses_dynamic


def generator_arguments(op: Op) -> list[str]:
    return [a.name for a in op.schema.arguments
            if isinstance(strip_optional(a.type), BaseType)
            and strip_optional(a.type).name is BaseTy.Generator]  # type: ignore[union-attr]


def kernel_devices(op: Op) -> list[str]:
    """The devices the library has kernels of `op` for: the CPU with a CPU (or composite)
    kernel, CUDA with a CUDA kernel."""
    keys = {k for k, _ in op.dispatch}
    composite = {DispatchKey.CompositeImplicitAutograd, DispatchKey.CompositeExplicitAutograd}
    return ["cpu"] * bool(keys & ({DispatchKey.CPU} | composite)) + \
        ["cuda"] * (DispatchKey.CUDA in keys)


def opcheck_utils(op: Op, library: Iterable[Op] = (),
                  sample: Sample | None = None) -> tuple[str, ...]:
    """The utilities of torch.library.opcheck that the opcheck check runs on the op: all of
    OPCHECK_UTILS, less those that functionalize it where torch cannot (its
    not-functionalizable warning), or its backward (backward-not-functionalizable), or that
    compare a str or Device it returns (non-tensor-return), or that run it on fake tensors where
    it has no fake kernel (no-fake), and less test_schema on a sample
    giving a float8 tensor (`float8_argument`)."""
    left: set[str] = set()
    if _unfunctionalizable(op, library) is not None:
        left.update(FUNCTIONALIZING_UTILS)
    if untraceable(op):
        left.update(FAKE_UTILS)
    if sample is not None and float8_argument(sample) is not None:
        left.add("test_schema")
    return tuple(u for u in OPCHECK_UTILS if u not in left)


def opcheck_skips(op: Op, library: Iterable[Op] = (), sample: Sample | None = None) -> str | None:
    """What the opcheck check leaves out on the op (on `sample`), and why (None: nothing)."""
    why = _unfunctionalizable(op, library)
    reasons = []
    if why is not None:
        left = [u for u in OPCHECK_UTILS if u in FUNCTIONALIZING_UTILS]
        reasons.append(f"without {', '.join(left)} on {op.name}, as {why}")
    if untraceable(op):
        left = [u for u in OPCHECK_UTILS if u in FAKE_UTILS]
        reasons.append(f"without {', '.join(left)} on {op.name}, which has no fake kernel (its "
                       "no-fake warning)")
    given = float8_argument(sample) if sample is not None else None
    if given is not None:
        reasons.append(f"without test_schema on this sample, as it gives '{given[0]}' a "
                       f"{given[1]} tensor, which test_schema's torch.allclose cannot compare")
    return "opgen runs opcheck " + "; and ".join(reasons) if reasons else None


def float8_argument(sample: Sample) -> tuple[str, str] | None:
    """(argument, dtype) of the first float8 tensor the sample gives, or None. opcheck's
    test_schema compares every input of each call before and after with torch.allclose, which
    has no float8 kernel, so it fails on any op taking one (torchao's mx and fp8 linears)."""
    def dtype_in(value: Any) -> str | None:
        if isinstance(value, TensorSample):
            return value.dtype if value.dtype.startswith("float8_") else None
        if isinstance(value, tuple):
            return next((d for d in map(dtype_in, value) if d is not None), None)
        return None

    for name, value in sample.args:
        found = dtype_in(value)
        if found is not None:
            return name, found
    return None


def _unfunctionalizable(op: Op, library: Iterable[Op]) -> str | None:
    """Why torch cannot functionalize the op or its backward (a warning of the op), or why
    AOTAutograd cannot compare what the op returns; None when it can do both."""
    if any(holds_str_or_device(r.type) for r in op.schema.returns):
        # AOTAutograd's output comparison has no case for them (tests/test_traceable_returns.py).
        return ("AOTAutograd cannot compare the str or Device it returns (its "
                "non-tensor-return warning)")
    ops = tuple(library)
    if unfunctionalizable(op, ops) is not None:
        return "torch cannot functionalize it (its not-functionalizable warning)"
    # the ops indexed by name, as formulas resolve their calls
    found = unfunctionalizable_in_backward(op, OpLibrary((OpFile("", None, ops),)))
    if found is not None:
        return (f"its backward calls {found[1].name}, which torch cannot functionalize (its "
                "backward-not-functionalizable warning)")
    return None


def why_not(op: Op, sample: Sample, check: str, library: Iterable[Op] = ()) -> str | None:
    """None when `check` has something to check on the sample (given a GPU for the GPU checks);
    else why it has not. `library`: the ops of its library (see `torch_refuses`)."""
    refused = torch_refuses(op, check, library)
    if refused is not None:
        return refused
    if check == "gradients":
        if not differentiable_inputs(op, library) or not any(differentiable_outputs(op, library)):
            return "the op has no gradients"
        return None if sample_has_gradients(op, sample, library) else (
            "the sample gives no differentiable input a floating tensor that may require grad")
    if check == "seeded":
        return None if "nondeterministic_seeded" in op.tags or generator_arguments(op) else \
            "the op is not nondeterministic_seeded and takes no Generator"
    if check == "vmap":
        return None if op.vmap is not None else "the op has no vmap:"
    if check == "autocast":
        return None if op.autocast is not None else "the op has no autocast:"
    if check in ("opcheck", "compile", "export"):
        return None
    if check == "devices":
        if "nondeterministic_seeded" in op.tags:
            return "the op is nondeterministic_seeded"
        devices = kernel_devices(op)
        if devices == ["cpu"]:
            return "the op has no CUDA kernel to compare with its CPU kernel"
        if devices == ["cuda"]:
            return "the op has no CPU kernel to compare its CUDA kernel with"
        return None if devices else "the op has no CPU or CUDA kernel"
    if check == "cudagraph":
        if "cuda" not in kernel_devices(op):
            return "the op has no CUDA kernel"
        for tag in ("cudagraph_unsafe", "nondeterministic_seeded"):
            if tag in op.tags:
                return f"the op is {tag}"
        return "an output's size depends on data" if has_dynamic_output(op) else None
    raise ValueError(f"unknown check {check!r}; checks: {', '.join(CHECKS)}")


# --------------------------------------------------------------------------------------------------
# The failures files


def failures_files(paths: Iterable[str]) -> list[str]:
    """The failures files of the op files or directories `paths`: in each directory of them (a
    directory's own, a file's directory's), where one exists."""
    dirs: list[str] = []
    for p in paths:
        d = p if os.path.isdir(p) else os.path.dirname(p) or "."
        if d not in dirs:
            dirs.append(d)
    return [f for f in (os.path.join(d, FAILURES_FILE) for d in dirs) if os.path.isfile(f)]


def read_failures(files: list[str], diags: Diagnostics,
                  samples: dict[str, tuple[Op, Sample]] | None, library: Iterable[Op] = (),
                  ) -> tuple[dict[str, dict[str, str]], dict[tuple[str, str], str]]:
    """Known failures files (`<op>[<sample>]: {<check>: <reason>}`) -> (entries, where each
    entry is as path:line:col); every problem an error in `diags`. `samples`, when given, maps
    sample ids to (op, sample): an entry must name one, and a check it has. An entry for a check
    that torch cannot pass on the op, which the sample checks skip (`torch_refuses`; `library`:
    every op of the library), is left out with a warning: it is not needed."""
    library = list(library)
    entries: dict[str, dict[str, str]] = {}
    where: dict[tuple[str, str], str] = {}
    for path in files:
        loader = YamlFile(path, diags)
        text = loader.read()
        if text is None:
            continue
        root = None
        for item in loader.compose(text):
            if item[0] == "root":
                root = item[1]
        if root is None or (type(root) is Scalar and root.tag == "null"):
            continue                # an empty file lists nothing; YAML errors were reported
        top = loader.mapping(root, "the failures file (<op>[<sample>]: {<check>: <reason>})",
                             None)
        for case_id, (key, value) in (top or {}).items():
            if samples is not None and case_id not in samples:
                loader.error(key, f"no sample '{short(case_id)}' in the op files",
                             suggest(case_id, list(samples))
                             or "keys are sample ids: <ns>::<op>[<index or name>]")
                continue
            fields = loader.mapping(value, f"the known failures of {case_id}", None)
            for check, (check_key, reason_node) in (fields or {}).items():
                if check not in CHECKS:
                    loader.error(check_key, f"unknown check '{short(check)}' in the known "
                                 f"failures of {case_id}; checks: {', '.join(CHECKS)}",
                                 check_hint(check))
                    continue
                reason = loader.string(reason_node, f"the reason {case_id} fails {check}")
                if reason is None:
                    continue
                if not reason.strip():
                    loader.error(reason_node, "a known failure needs a reason",
                                 "say why it fails, and what would fix it")
                    continue
                if samples is not None:
                    refused = torch_refuses(samples[case_id][0], check, library)
                    if refused is not None:
                        diags.warning(loader.loc(check_key),
                                      f"{case_id} needs no {check} entry: the sample checks "
                                      f"skip {check} on it, as {refused}", "remove the entry")
                        continue
                    why = why_not(*samples[case_id], check, library)
                    if why is not None:
                        loader.error(check_key, f"{case_id} has no {check} check ({why}), so "
                                     "it cannot fail", "remove the entry")
                        continue
                entries.setdefault(case_id, {})[check] = reason
                loc = loader.loc(check_key)
                where[(case_id, check)] = f"{loc.path}:{loc.line}:{loc.col}"
    return entries, where


def check_failures(paths: Iterable[str], ops: Iterable[Op], diags: Diagnostics) -> None:
    """`check`'s part: the failures file of each directory in `paths` (where every op file of it
    is loaded), against the samples of `ops`."""
    paths = list(paths)
    dirs = [p for p in paths if os.path.isdir(p)]
    named = [p for p in paths if p not in dirs]
    files = {os.path.realpath(p) for p in named}
    # A directory whose op files are all named one by one (`schemas = ["ops/a.yaml",
    # "ops/b.yaml"]`) is loaded whole too: its failures file is checked as a listed directory's.
    for d in dict.fromkeys(os.path.dirname(p) or "." for p in named):
        if d in dirs:
            continue
        with contextlib.suppress(OSError):
            names = [n for n in os.listdir(d) if n.endswith(".yaml") and n != FAILURES_FILE
                     and os.path.isfile(os.path.join(d, n))]
            if all(os.path.realpath(os.path.join(d, n)) in files for n in names):
                dirs.append(d)
    ops = list(ops)
    read_failures(failures_files(dirs), diags, sample_ids(ops), ops)

