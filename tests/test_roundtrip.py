"""The grammar against torch's own parser on real corpora.

For every schema `s` torch accepts: `parse_schema(str(parse_schema(s))) == parse_schema(s)` and
`torch._C.parse_schema(str(parse_schema(s))) == torch._C.parse_schema(s)`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torchgen
import yaml

from codegen import parse_schema

NATIVE_YAML = os.path.join(os.path.dirname(torchgen.__file__),
                           "packaged", "ATen", "native", "native_functions.yaml")


def native_schemas() -> list[str]:
    with open(NATIVE_YAML) as f:
        entries = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return ["aten::" + e["func"] for e in entries]


def registered_schemas() -> list[str]:
    """Every schema torch registers, read in a process of its own: in this one, an earlier test
    may have closed a library that defined two overloads of one op, after which torch's registry
    hands out freed schemas (torch 2.13: `_jit_get_all_schemas` then fails with
    std::bad_array_new_length, or crashes)."""
    code = "import json, torch; print(json.dumps([str(s) for s in torch._C._jit_get_all_schemas()]))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, check=True)
    return json.loads(proc.stdout)


def _torch_parse(s: str):
    try:
        return torch._C.parse_schema(s)
    except RuntimeError:
        # torch's parser knows only registered custom classes and lacks some of torchgen's base
        # types (Dimname, GraphModule); those schemas are still checked for our own round trip.
        return None


def _check_corpus(corpus: list[str]) -> list[str]:
    failures = []
    for s in corpus:
        ours = parse_schema(s)
        text = str(ours)
        again = parse_schema(text)
        if again != ours:
            failures.append(f"IR round trip: {s!r} -> {text!r}")
            continue
        theirs = _torch_parse(s)
        if theirs is not None and torch._C.parse_schema(text) != theirs:
            failures.append(f"torch disagrees: {s!r} -> {text!r}")
    return failures


def test_native_functions_corpus_round_trips():
    corpus = native_schemas()
    assert len(corpus) > 2500
    assert _check_corpus(corpus) == []


def test_registered_schemas_round_trip():
    corpus = registered_schemas()
    assert len(corpus) > 3000
    assert _check_corpus(corpus) == []


def test_torchgen_agrees_on_canonical_text():
    # torchgen demands canonical spelling. Ours prints exactly that spelling, except where torchgen
    # keeps the source verbatim (string quotes, float literals): there the two must mean the same.
    from torchgen.model import FunctionSchema as TorchgenSchema

    mismatches = []
    for s in native_schemas():
        ours = parse_schema(s)
        theirs = str(TorchgenSchema.parse(s.removeprefix("aten::")))
        if str(ours).removeprefix("aten::") != theirs and parse_schema("aten::" + theirs) != ours:
            mismatches.append((str(ours), theirs))
    assert mismatches == []


@pytest.mark.parametrize("text", [
    "f(Tensor(a)[](b) x) -> ()",
    "f(Dict(str, Tensor)(a!) d, (int, t)[] x) -> ((int, t))",
    "f(Tensor x) -> ((str, t)[])",
    "f(Tensor(a|b -> b|c) x, Tensor(*) y) -> Tensor(a)",
    "f(int a, ...) -> (Tensor, ...)",
    "f(...) -> ...",
    "aten::setdefault.bool(Dict(bool, t)(a!) self, bool(b -> *) key, t(c -> *) default_value) -> t(*)",
    "f(__torch__.torch.classes.c10d.Work w) -> int x2",
    "f(int[1]? a=None, SymInt[] b=[1, 2], float c=-0.5, str d='it\\'s', bool[3] e=[True, False, True]) -> ()",
    "f(ScalarType? dtype=long, MemoryFormat m=contiguous_format, int reduction=Mean) -> ()",
    "f(complex c=1j, Scalar s=-1e-05) -> ()",
    "f(Union(int, str) u, Future(Tensor) f, Await(int) a, RRef(t) r) -> Any",
])
def test_exotic_forms_round_trip_and_agree_with_torch(text):
    ours = parse_schema(text)
    assert parse_schema(str(ours)) == ours
    theirs = _torch_parse(text)
    if theirs is not None:
        assert torch._C.parse_schema(str(ours)) == theirs
