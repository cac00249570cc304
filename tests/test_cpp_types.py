"""Every C++ binding of codegen.api.cpp, checked by torch itself: the op file covering all
bindable types (tests/golden/cpp/inputs/types.yaml) is generated and built into a scratch library,
whose registration makes c10 infer each kernel's schema from its C++ signature and compare it with
the declared one; then each op is called from Python and its kernel's result shows every
argument arrived intact.

The scratch library registers its kernels as CompositeExplicitAutograd (the golden file's CPU,
CUDA and Meta entries are dropped): the bindings are the same for every key, and such ops need no
fake rule.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests import scratch

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cty_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cty")
    text = (HERE / "golden/cpp/inputs/types.yaml").read_text(encoding="utf-8")
    text = re.sub(r", (CUDA|Meta): [\w:]+", "", text).replace("{CPU:", "{CompositeExplicitAutograd:")
    scratch.make_root(root, {"types.yaml": text},
                      {"cty/kernels.cpp": (HERE / "cpp/cty_kernels.cpp").read_text()})
    gen = scratch.generate(root)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    built = scratch.build(root)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "warning" not in built.stdout, built.stdout
    return root


CALLS = r"""
import json, torch, runtime
from runtime import ops
t = torch.ones(3)
out = {}
b = torch.zeros(3); f = [torch.zeros(2), torch.zeros(1)]
r = ops.tensors(t, b, torch.full((3,), 2.0), [t, t], [None, t], f)
out["tensors"] = [r.tolist(), b.tolist(), [x.tolist() for x in f]]
out["ints"] = ops.ints(t, 1, 2, [3], [4, 5], [6, 7], None, [8], None, 9)
out["ints_none"] = ops.ints(t, 0, 0, [], [], [0, 0], 5, None, [1, 1], None)
out["floats"] = ops.floats(t, 0.5, None, [1.5], [2.0], 3, 0.25, [1, 2.5])
out["bools"] = [ops.bools(t, True, None, [True, False, True], [True, True], False),
                ops.bools(torch.ones(2), False, False, [False] * 3, [], True)]
out["strings"] = [ops.strings(t, "a", None, ["x", "y"]), ops.strings(t, "", "b", [], "d")]
first, text = ops.enums(t, torch.float16, None, torch.strided, None, torch.device("cpu"),
                        torch.device("cpu"), torch.channels_last, None, 3)
out["enums"] = [str(first), text]
first, text = ops.enums(t, torch.float16, torch.int32, torch.strided, torch.sparse_coo,
                        torch.device("cpu"), None, torch.contiguous_format,
                        torch.preserve_format, 0)
out["enums2"] = [str(first), text]
g = torch.Generator().manual_seed(11)
out["objects"] = ops.objects(t, None, g, torch.Stream("cpu"), torch.ones(4).untyped_storage())
a, lst, c, d, e, f_, g_, h, i = ops.returns(torch.ones(2, 3))
out["returns"] = [a.tolist(), [x.tolist() for x in lst], c, d, e, f_, g_, h, i]
x = torch.zeros(2)
out["fill_same"] = ops.fill_(x, 4) is x and x.tolist() == [4.0, 4.0]
lo, hi = torch.empty(0), torch.empty(0)
res = ops.split_out(torch.tensor([-1.0, 2.0]), lo=lo, hi=hi)
out["split"] = [res[0] is lo, res[1] is hi, lo.tolist(), hi.tolist(),
                [y.tolist() for y in ops.split(torch.tensor([-1.0, 2.0]))]]
out["fill"] = ops.fill(torch.zeros(2), 3).tolist()
ys = [torch.ones(2), torch.ones(1)]
out["zero_all"] = [ops.zero_all_(ys), [y.tolist() for y in ys]]
bb, bc, bd = torch.zeros(2), torch.ones(2), [torch.zeros(1)]
out["bang"] = [ops.bang(torch.ones(2), bb, bc, bd, [torch.ones(2)], torch.ones(2)),
               bb.tolist(), bc.tolist(), bd[0].tolist()]
bi = torch.zeros(2)
out["bang_int"] = [ops.bang_int(bi, 4), bi.tolist(), ops.bang_int(bi, None), bi.tolist()]
out["dicts"] = sorted((k, v.tolist()) for k, v in ops.dicts(
    torch.ones(2), {"a": torch.zeros(2)}, {"b": [1, 2, 3]}).items())
out["defaults"] = ops.defaults(torch.ones(2)).tolist()
out["pick"] = [ops.pick_int(torch.arange(6.).view(3, 2), 1).tolist(),
               ops.pick_Tensor(torch.arange(3.), torch.tensor([2, 0])).tolist()]
out["composite"] = ops.composite(torch.ones(2, 3), 1).tolist()
out["shared"] = [ops.shared_a(t).tolist(), ops.shared_b(t).tolist()]
out["declared"] = hasattr(torch.ops.cty, "declared_only")
out["nested"] = ops.nested(t, [[1, 2], [3]], [[4], [5, 6]], [[0.5], [1.5]], [[True, False]],
                           [["ab"], ["c", ""]], [[t], [t, torch.ones(2)]], None, [7, None],
                           [None, "xyz"])
out["nested_g"] = ops.nested(t, [], [], [], [], [], [], [[8, 9]], [], [])[6]
out["tuples"] = [list(ops.tuples(t, [("paper", "cites", "paper"), ("a", "b", "c")])),
                 list(ops.tuples(t, [], (t, t, torch.ones(5)), (2, 3)))]
a, b, c, d, e = ops.optional_returns(torch.ones(2), True)
out["optional_returns"] = [[x.tolist() for x in a], b, c, d, [None if x is None else x.tolist()
                                                            for x in e]]
out["optional_returns_none"] = list(ops.optional_returns(t, False))
x = torch.zeros(2)
same, before = ops.step_(x)
out["step"] = [same is x, x.tolist(), before.tolist()]
o = torch.zeros(3)
out["scale_into"] = [ops.scale_into(t, o) is o, o.tolist()]
out["enum_numbers"] = [ops.enum_numbers(t), ops.enum_numbers(t, torch.float32, torch.strided,
                                                            torch.contiguous_format, torch.bool)]
o = torch.zeros(3)
out["myadd_out"] = [ops.myadd_out(t, t, o), o.tolist()]
print("RESULT" + json.dumps(out))
"""


def test_every_binding_round_trips(cty_root: Path) -> None:
    proc = scratch.python(cty_root, CALLS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert out["tensors"] == [[6.0] * 3, [1.0] * 3, [[1.0, 1.0], [1.0]]]
    # numel 3 + a 1 + b 2 + f absent 1000 + c 30 + d 900 + e 13000 + g 80000 + i 9000000
    assert out["ints"] == 3 + 1 + 2 + 1000 + 30 + 900 + 13000 + 80000 + 9000000
    assert out["ints_none"] == 3 + 5 + 200000
    assert out["floats"] == 3 + 0.5 + 0.5 + 3 + 15 + 200 + 250 + 35000
    assert out["bools"] == [True, True]
    assert out["strings"] == ['3|a|-|x,y|q"x', "3||b||d"]
    # A returned ScalarType reaches Python as its enum value (torch's IValue for it is an int).
    assert out["enums"] == ["5", "3|Half|-|Strided|-|cpu|cpu|ChannelsLast|-|3"]
    assert out["enums2"] == ["3",
                             "3|Half|Int|Strided|Sparse|cpu|-|Contiguous|Preserve|0"]
    assert out["objects"] == "3|-|11|cpu|16"
    assert out["returns"] == [[[-1.0] * 3] * 2, [[[1.0] * 3] * 2, [[2.0] * 3] * 2], 6, 0.25,
                              True, 7, 2, [2, 3], "done"]
    assert out["fill_same"] is True
    assert out["split"] == [True, True, [-1.0, 0.0], [0.0, 2.0], [[-1.0, 0.0], [0.0, 2.0]]]
    assert out["fill"] == [3.0, 3.0]
    assert out["zero_all"] == [None, [[0.0, 0.0], [0.0]]]
    assert out["bang"] == [None, [3.0, 3.0], [2.0, 2.0], [1.0]]
    assert out["bang_int"] == [None, [4.0, 4.0], None, [-1.0, -1.0]]
    assert out["dicts"] == [["a", [1.0, 1.0]], ["b_n", [3.0]]]
    assert out["defaults"] == [2.5, 2.5]
    assert out["pick"] == [[2.0, 3.0], [2.0, 0.0]]
    assert out["composite"] == [3.0, 3.0]
    assert out["shared"] == [[-1.0] * 3, [-1.0] * 3]
    assert out["declared"] is True
    assert out["nested"] == [[2, 1], [4, 5, 6], [1, 3], [1, 0], [2, 1, 0], [6, 6, 5], [-1], [7, -1],
                             [-1, 3]]
    assert out["nested_g"] == [8, 9]
    assert out["tuples"] == [[3, "paper-cites-paper;a-b-c;"], [3 + 50 + 2300, ""]]
    assert out["optional_returns"] == [[[-1.0, -1.0], [1.0, 1.0]], 2, "here", [2],
                                       [[1.0, 1.0], None]]
    assert out["optional_returns_none"] == [None, None, None, None, [None]]
    assert out["step"] == [True, [1.0, 1.0], [0.0, 0.0]]
    assert out["scale_into"] == [True, [2.0] * 3]
    # The defaults arrive as torch numbered them: 39 is int3, 0 strided, 2 channels_last.
    assert out["enum_numbers"] == ["Int3|Strided|ChannelsLast|Float8_e4m3fn|1",
                                   "Float|Strided|Contiguous|Bool|1"]
    assert out["myadd_out"] == [None, [2.0] * 3]


SHIM_CALLS = r"""
import ctypes, json, os, torch, runtime
from runtime import _aoti, _loader, _manifest
so = ctypes.CDLL(str(_loader.locate(_manifest).libraries / _aoti.LIBRARIES[0]), mode=os.RTLD_NOLOAD)
i32 = ctypes.c_int32
# torch hands tensor handles (new at::Tensor*) to Python as unnamed capsules
capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
capsule_pointer.restype, capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
capsule = ctypes.pythonapi.PyCapsule_New
capsule.restype, capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
def call(*enums):
    handle = torch._C._aoti.unsafe_alloc_void_ptr_from_tensor(torch.ones(1, 2, 3, 4))
    result = ctypes.c_void_p()
    err = so.aoti_torch_cpu_shim_enums(ctypes.c_void_p(capsule_pointer(handle, None)), *enums,
                                       ctypes.byref(result))
    torch._C._aoti.alloc_tensor_by_stealing_from_void_ptr(handle)
    if err:
        return err
    r = torch._C._aoti.alloc_tensor_by_stealing_from_void_ptr(capsule(result.value, None, None))
    return [str(r.dtype), r.is_contiguous(), r.is_contiguous(memory_format=torch.channels_last)]
def some(v):
    return ctypes.byref(i32(v))
out = [
    # double, strided, cpu (index -1), channels_last; the optionals None
    call(i32(7), None, i32(0), None, i32(0), i32(-1), None, i32(0), i32(2), None),
    # the optionals given: half, strided, cpu:0, contiguous
    call(i32(6), some(5), i32(1), some(0), i32(0), i32(0), some(0), i32(0), i32(2), some(0)),
    # the kernel refuses the sparse layout: an error code, not an exception through C
    call(i32(6), None, i32(1), None, i32(0), i32(-1), None, i32(0), i32(0), None),
]
print("RESULT" + json.dumps(out))
"""


def test_aoti_shim_takes_enums_and_devices_as_torch_numbers_them(cty_root: Path) -> None:
    """The op's AOTInductor C shim (Note [AOTInductor C shims]), called as a compiled model calls
    it: ScalarType, Layout and MemoryFormat as their int32_t numbers, a Device as its type's
    number and an index, an optional one through a pointer (NULL for None)."""
    proc = scratch.python(cty_root, SHIM_CALLS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.split("RESULT", 1)[1]) == [
        ["torch.float64", False, True], ["torch.float16", True, False], 1]


def test_declared_schemas_match_torch(cty_root: Path) -> None:
    """What torch registered is the canonical schema text, op for op."""
    code = ("import torch, runtime, json\n"
            "print('RESULT' + json.dumps(sorted(str(s) for s in torch._C._jit_get_all_schemas()"
            " if str(s).startswith('cty::'))))")
    proc = scratch.python(cty_root, code)
    assert proc.returncode == 0, proc.stderr
    registered = json.loads(proc.stdout.split("RESULT", 1)[1])
    from codegen.load import load_library
    lib = load_library([str(cty_root / "schemas/types.yaml")])
    import torch
    ours = sorted(str(torch._C.parse_schema(str(op.schema))) for op in lib.ops)
    assert registered == ours
