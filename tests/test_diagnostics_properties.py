"""Property tests: whatever bytes an op file holds, loading it either succeeds or raises `UserError`
whose every diagnostic points at a real line and column of that file. Never another exception.

The default run tries a few hundred fixed (derandomized) inputs per property; `make fuzz`
(HYPOTHESIS_PROFILE=fuzz) thousands with fresh randomness, and `make test-slow` adds a loop of
random files.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codegen.diagnostics import UserError
from codegen.load import OP_KEYS, load_library
from codegen.load_samples import TENSOR_SAMPLE_KEYS

# `make fuzz` (HYPOTHESIS_PROFILE=fuzz): the profile's example count, fresh randomness.
FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"

VALID = """\
namespace: ex
ops:
  - func: scaled_add(Tensor self, Tensor other, float alpha=1.0) -> Tensor
    doc: self + alpha * other
    tags: [pointwise, pt2_compliant_tag]
    dispatch:
      CPU: scaled_add_cpu
      CUDA: scaled_add_cuda
    fake: broadcast(self, other)
    derivatives:
      self: grad
      other: grad * alpha
    samples:
      small: {self: {shape: [3]}, other: {shape: [3], requires_grad: true}, alpha: 2.0}
      given: {self: {values: [[1, 2], [3, 4]], dtype: float64}, other: {shape: [2]}}
    autocast: {device_type: cuda, cast_inputs: float16}
    vmap: pointwise
  - func: scaled_add_(Tensor(a!) self, Tensor other, float alpha=1.0) -> Tensor(a!)
    dispatch: {CompositeExplicitAutograd: "pkg.kernels:scaled_add_"}
  - func: >-
      scaled_add.out(Tensor self, Tensor other, float alpha=1.0, *, Tensor(a!) out) -> Tensor(a!)
  - func: "ex::topk(Tensor self, SymInt k, int dim=-1) -> (Tensor values, Tensor indices)"
    samples: [{self: {shape: [4, 5]}, k: 2}]
"""


def check_file(path: Path) -> None:
    """Load `path`; any error must be a UserError located inside the file."""
    try:
        load_library([str(path)])
    except UserError as e:
        text = path.read_bytes().decode("utf-8", "replace").lstrip("\ufeff")
        # YAML's line breaks (codegen/yaml_source.py, Note [Line breaks])
        lines = re.split("\r\n|[\r\n\x85\u2028\u2029]", text)
        assert e.diags.items
        for d in e.diags.items:
            assert d.loc.path == str(path)
            assert 1 <= d.loc.line <= len(lines), (d, len(lines))
            assert 1 <= d.loc.col <= len(lines[d.loc.line - 1]) + 1, (d, lines[d.loc.line - 1])
            assert d.message
        e.diags.render()


def settings_for(n: int):
    return settings(max_examples=settings.default.max_examples if FUZZ else n, deadline=None,
                    derandomize=not FUZZ,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def test_the_seed_file_is_valid(tmp_path):
    p = tmp_path / "ops.yaml"
    p.write_text(VALID)
    assert len(load_library([str(p)]).ops) == 4


@settings_for(150)
@given(data=st.binary(max_size=400))
def test_random_bytes(tmp_path, data):
    p = tmp_path / "ops.yaml"
    p.write_bytes(data)
    check_file(p)


MUTATION_ALPHABET = list(" \t\n:-,[]{}&*!|>'\"#%@`?=()\\.~0123456789aZ_\x00\x07\xff\u00e9") + [
    "Tensor", "Tensor(a!)", "->", "*,", "::", "!!python/object:os.system", "&a", "*a", "<<: ",
    "---\n", "\n  ", "func: ", "dispatch: ", "samples: ", "shape: ", "values: ", "null", "yes",
    "1e400", ".nan", "[" * 50, "- " * 40]


@settings_for(300)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 6))
def test_mutated_valid_file(tmp_path, seed, n):
    rng = random.Random(seed)
    text = VALID
    for _ in range(n):
        i = rng.randrange(len(text) + 1)
        kind = rng.randrange(5)
        if kind == 0:  # delete a run
            text = text[:i] + text[i + rng.randrange(1, 12):]
        elif kind == 1:  # insert a token
            text = text[:i] + rng.choice(MUTATION_ALPHABET) + text[i:]
        elif kind == 2:  # replace one character
            text = text[:i] + rng.choice(MUTATION_ALPHABET)[:1] + text[i + 1:]
        elif kind == 3:  # duplicate a line
            lines = text.splitlines(keepends=True)
            j = rng.randrange(len(lines))
            lines.insert(j, lines[j])
            text = "".join(lines)
        else:  # swap two lines
            lines = text.splitlines(keepends=True)
            a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[a], lines[b] = lines[b], lines[a]
            text = "".join(lines)
    p = tmp_path / "ops.yaml"
    p.write_bytes(text.encode("utf-8", "surrogatepass"))
    check_file(p)


KEYS = list(OP_KEYS) + list(TENSOR_SAMPLE_KEYS) + [
    "namespace", "ops", "self", "other", "alpha", "CPU", "Meta", "CompositeImplicitAutograd",
    "output_differentiability", "device_type", "cast_inputs", "x, y", "bogus"]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["ex::f(Tensor self) -> Tensor", "f(Tensor self, Tensor other) -> Tensor",
                     "like(self)", "grad", "pointwise", "float16", "cuda", "pkg.mod:fn",
                     "f_cpu", "core", "non_differentiable", "ex::g(int[2] k=1) -> ()"]))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)),
    max_leaves=25)
OP = st.fixed_dictionaries({"func": SCALARS},
                           optional={k: VALUES for k in OP_KEYS if k != "func"})
FILES = st.one_of(
    st.lists(OP, max_size=4),
    st.fixed_dictionaries({"ops": st.lists(OP, max_size=4)},
                          optional={"namespace": SCALARS, "extra": VALUES}),
    VALUES)


@settings_for(300)
@given(doc=FILES)
def test_random_structures(tmp_path, doc):
    p = tmp_path / "ops.yaml"
    p.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    check_file(p)


SCHEMA_PIECES = ["ex::", "f", ".out", "(", ")", "Tensor", "Tensor(a!)", "Tensor(a)", "int",
                 "int[2]", "float", "Scalar", "?", "[]", " self", " x", " out", "=", "1", "1.5",
                 "None", "Mean", "[0,1]", '"s"', ", ", "*, ", " -> ", "()", "...",
                 "(Tensor, Tensor)", "Tensor(a!)[]", "Any", "from", "lambda", "_"]


@settings_for(300)
@given(parts=st.lists(st.sampled_from(SCHEMA_PIECES), min_size=1, max_size=16),
       fake=st.booleans(), dispatch=st.sampled_from([None, "CPU", "Meta",
                                                     "CompositeImplicitAutograd"]))
def test_random_schemas(tmp_path, parts, fake, dispatch):
    func = "".join(parts)
    op = {"func": func}
    if fake:
        op["fake"] = "like(self)"
    if dispatch:
        op["dispatch"] = {dispatch: "k"}
    p = tmp_path / "ops.yaml"
    p.write_text(yaml.safe_dump([op]), encoding="utf-8")
    check_file(p)


@pytest.mark.slow
def test_many_random_files(tmp_path):
    """Fresh randomness each run: raw bytes, and the valid file cut and spliced with itself."""
    rng = random.Random()
    for i in range(3000):
        if i % 2:
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(300)))
        else:
            a, b = sorted(rng.randrange(len(VALID)) for _ in range(2))
            c = rng.randrange(len(VALID))
            data = (VALID[:a] + VALID[c:c + rng.randrange(40)] + VALID[b:]).encode()
        p = tmp_path / "ops.yaml"
        p.write_bytes(data)
        check_file(p)
