"""`model.untraceable_return` and `model.untraceable_argument` say what torch.compile does: for
each return type, an op defined with torch.library compiles with fullgraph=True exactly when the
rule says it traces; for each argument type, it compiles with aot_eager (functionalization)
exactly when the rule says so. A return holding a str or a Device fails opcheck's
test_aot_dispatch_dynamic, and `model.unexported_return` says which returns a program
torch.export saves loses (exported, saved, loaded and run), which the sample checks leave out."""

from __future__ import annotations

import io
import itertools

import pytest
import torch

from codegen.model import (holds_str_or_device, unexported_return, untraceable_argument,
                           untraceable_return)
from codegen.parse import parse_schema

RETURNS = {
    "int": 3, "SymInt": 3, "bool": True, "str": "a", "Scalar": 2, "ScalarType": torch.float32,
    "Device": torch.device("cpu"), "int?": 3, "float": 1.5, "int[]": [1, 2], "SymInt[]": [2], "bool[]": [True],
    "float[]": [1.0], "str[]": ["a"],
    "Tensor": "tensor", "(Tensor, int)": "pair",
    # pyg-team/pyg-lib pyg_lib/csrc/sampler/neighbor.cpp returns Dicts of Tensors.
    "Dict(str, Tensor)": "dict", "Dict(str, int)": {"a": 1}, "Dict(str, Tensor)?": "dict",
    "(Tensor, Dict(str, Tensor))": "tensor_and_dict",
    # Several returns: a str or a Device among them breaks the graph, numbers and dtypes do not.
    # pytorch/audio src/libtorchaudio/sox/io.h (get_info_file, registered with an inferred schema)
    "(int, int, int, int, str)": (8000, 16, 2, 16, "PCM_S"),
    "(Tensor, str)": lambda x: (x.clone(), "a"), "(Tensor, str[])": lambda x: (x.clone(), ["a"]),
    "(Tensor, str?)": lambda x: (x.clone(), "a"), "(Tensor, (int, str))": lambda x: (x.clone(), (1, "a")),
    "(Tensor, Device)": lambda x: (x.clone(), torch.device("cpu")),
    "(Tensor, ScalarType)": lambda x: (x.clone(), torch.float32),
    "(Tensor, bool)": lambda x: (x.clone(), True), "(int, Scalar)": (1, 2),
    "(Tensor, int[])": lambda x: (x.clone(), [1]), "(Tensor, (int, int))": lambda x: (x.clone(), (1, 2)),
    # Lists, optionals, bools and enums, for the export rule (model.unexported_return).
    "Tensor[]": lambda x: [x.clone()], "(Tensor, Tensor[])": lambda x: (x.clone(), [x.clone()]),
    "Tensor?[]": lambda x: [x.clone(), None], "Tensor[]?": lambda x: [x.clone()],
    "int[]?": [1], "Scalar[]": [1, 2.0], "(Tensor, float[])": lambda x: (x.clone(), [1.5]),
    "bool?": True, "(Tensor, bool?)": lambda x: (x.clone(), True), "(int, bool)": (1, True),
    "ScalarType?": torch.float32, "(Tensor, ScalarType?)": lambda x: (x.clone(), torch.float32),
    "Layout": torch.strided, "(Tensor, MemoryFormat)": lambda x: (x.clone(), torch.contiguous_format),
    "(float, float)": (1.0, 2.0), "(Tensor, Tensor?)": lambda x: (x.clone(), None),
}
_names = itertools.count()


def _define(ret: str) -> tuple[torch.library.Library, torch._ops.OpOverload]:
    """`f(Tensor x) -> ret`, its kernel (which fake tensors run too) returning RETURNS[ret]."""
    ns = f"opgen_traceable_{next(_names)}"
    lib = torch.library.Library(ns, "DEF")
    lib.define(f"f(Tensor x) -> {ret}")
    value = RETURNS[ret]

    def kernel(x):
        if callable(value):
            return value(x)
        if value == "tensor":
            return x.clone()
        if value == "dict":
            return {"a": x.clone()}
        if value == "tensor_and_dict":
            return x.clone(), {"a": x.clone()}
        return (x.clone(), 3) if value == "pair" else value

    lib.impl("f", kernel, "CompositeExplicitAutograd")
    return lib, getattr(torch.ops, ns).f.default


@pytest.mark.parametrize("ret", RETURNS)
def test_rule_matches_torch_compile(ret: str) -> None:
    lib, op = _define(ret)
    torch._dynamo.reset()
    try:
        torch.compile(lambda x: op(x), fullgraph=True, backend="eager")(torch.ones(2))
        traced = True
    except torch._dynamo.exc.Unsupported:
        traced = False
    finally:
        lib._destroy()
    schema = parse_schema(f"{op._schema.name}(Tensor x) -> {ret}")
    assert (untraceable_return(schema.returns) is None) == traced, ret


@pytest.mark.parametrize("ret", [r for r in RETURNS if "Dict" not in r])
def test_str_or_device_returns_fail_aot_dispatch(ret: str) -> None:
    """opcheck's test_aot_dispatch_dynamic cannot compare a str or a Device (the sample checks
    leave it out for such an op); it compares every other return."""
    lib, op = _define(ret)
    try:
        try:
            torch.library.opcheck(op, (torch.ones(2),), test_utils=("test_aot_dispatch_dynamic",))
            compared = True
        except Exception:
            compared = False
    finally:
        lib._destroy()
    refused = any(holds_str_or_device(r.type)
                  for r in parse_schema(f"ns::f(Tensor x) -> {ret}").returns)
    assert compared == (not refused), ret


@pytest.mark.parametrize("ret", RETURNS)
def test_export_rule_matches_torch(ret: str) -> None:
    """A program torch.export makes of a call, saved, loaded and run, gives back what the op
    returns exactly where `model.unexported_return` finds no return it loses."""
    lib, op = _define(ret)
    x = torch.ones(2)

    class Call(torch.nn.Module):
        def forward(self, t):
            return op(t)

    try:
        buffer = io.BytesIO()
        torch.export.save(torch.export.export(Call(), (x,)), buffer)
        buffer.seek(0)
        out = torch.export.load(buffer).module()(x)
        torch.testing.assert_close(out, op(x))
        exported = True
    except Exception:
        exported = False
    finally:
        lib._destroy()
    lost = unexported_return(parse_schema(f"ns::f(Tensor x) -> {ret}").returns)
    assert (lost is None) == exported, (ret, lost)


ARGUMENTS = {
    # pyg-team/pyg-lib pyg_lib/csrc/sampler/neighbor.cpp (seed_dict, ...)
    "Dict(str, Tensor)": lambda t: {"a": t}, "Dict(str, Tensor)?": lambda t: {"a": t},
    # pytorch/torchcodec src/torchcodec/_core/custom_ops.cpp (custom_frame_mappings)
    "(Tensor, Tensor, Tensor)?": lambda t: (t, t, t),
    "(Tensor, int)": lambda t: (t, 3), "(Tensor, Tensor)[]": lambda t: [(t, t)],
    "Tensor[]": lambda t: [t], "Tensor?[]": lambda t: [t, None], "Dict(str, int)": lambda t: {"a": 1},
    # vllm-project/vllm csrc/torch_bindings.cpp (static_scaled_fp8_quant's group_shape)
    "(int, int)?": lambda t: (1, 2), "(str, str, str)[]": lambda t: [("a", "b", "c")],
}


@pytest.mark.parametrize("arg", ARGUMENTS)
def test_argument_rule_matches_torch_compile(arg: str) -> None:
    ns = f"opgen_traceable_{next(_names)}"
    lib = torch.library.Library(ns, "DEF")
    lib.define(f"f(Tensor x, {arg} a) -> Tensor")
    lib.impl("f", lambda x, a: x.clone(), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{ns}::f", lambda x, a: torch.empty_like(x), lib=lib)
    op = getattr(torch.ops, ns).f.default
    torch._dynamo.reset()
    try:
        torch.compile(lambda x, y: op(x, ARGUMENTS[arg](y * 2)), fullgraph=True,
                      backend="aot_eager")(torch.ones(2), torch.ones(2))
        traced = True
    except torch._dynamo.exc.BackendCompilerFailed as e:
        assert "convert all Tensors to FakeTensors" in str(e), e
        traced = False
    finally:
        lib._destroy()
    schema = parse_schema(f"{ns}::f(Tensor x, {arg} a) -> Tensor")
    assert (untraceable_argument(schema.arguments) is None) == traced, arg
