"""`model.untraceable_return` says what torch.compile does: for each return type, an op defined
with torch.library compiles with fullgraph=True exactly when the rule says it traces."""

from __future__ import annotations

import itertools

import pytest
import torch

from codegen.model import untraceable_return
from codegen.parse import parse_schema

RETURNS = {
    "int": 3, "SymInt": 3, "bool": True, "str": "a", "Scalar": 2, "ScalarType": torch.float32,
    "Device": torch.device("cpu"), "int?": 3, "float": 1.5, "int[]": [1, 2], "SymInt[]": [2], "bool[]": [True],
    "float[]": [1.0], "str[]": ["a"],
    "Tensor": "tensor", "(Tensor, int)": "pair",
}
_names = itertools.count()


@pytest.mark.parametrize("ret", RETURNS)
def test_rule_matches_torch_compile(ret: str) -> None:
    ns = f"opgen_traceable_{next(_names)}"
    lib = torch.library.Library(ns, "DEF")
    lib.define(f"f(Tensor x) -> {ret}")
    value = RETURNS[ret]

    def kernel(x):
        if value == "tensor":
            return x.clone()
        return (x.clone(), 3) if value == "pair" else value

    lib.impl("f", kernel, "CompositeExplicitAutograd")
    op = getattr(torch.ops, ns).f.default
    torch._dynamo.reset()
    try:
        torch.compile(lambda x: op(x), fullgraph=True, backend="eager")(torch.ones(2))
        traced = True
    except torch._dynamo.exc.Unsupported:
        traced = False
    finally:
        lib._destroy()
    schema = parse_schema(f"{ns}::f(Tensor x) -> {ret}")
    assert (untraceable_return(schema.returns) is None) == traced, ret
