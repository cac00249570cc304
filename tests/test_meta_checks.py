"""One fake rule, one meaning on both ABIs: `check(...)` preconditions and device checks under
FakeTensorMode and torch.export, and Meta kernels of ops that return nothing (issue 14, items
4-6).

A scratch root with three namespaces built for real:
- `chkf` (full ABI): every op; `mixs`/`mixd` checks become a C++ Meta kernel (TORCH_SYM_CHECK,
  TORCH_CHECK), `devs` stays a Python fake (a Meta kernel sees every tensor on `meta`);
- `chks` (stable, min_torch 2.13): `mixs` compares shapes, which a stable Meta kernel could read
  only as int64_t, so its fake stays Python with its checks; `devs` likewise;
- `chko` (stable, min_torch 2.10, no Python fakes possible): `mixd` (rank and dtype checks) and
  extension-cpp's `myadd_out(...) -> ()` are stable C++ Meta kernels.
Each mismatch must fail with the same message on every namespace (the namespace's name aside).
"""

from __future__ import annotations

import json
import textwrap

import pytest

from codegen.dest import cpp_stable, py_fake
from codegen.load import load_library
from tests import scratch

OPS = {
    "mixs": """\
  - func: mixs(Tensor a, Tensor b) -> Tensor
    dispatch: {CPU: mixs_cpu}
    fake: check(a.shape == b.shape, "a and b differ in shape"); check(a.dtype == b.dtype, "a and b differ in dtype"); like(a)
""",
    "mixd": """\
  - func: mixd(Tensor a, Tensor b) -> Tensor
    dispatch: {CPU: mixd_cpu}
    fake: check(a.dim() == b.dim(), "a and b differ in rank"); check(a.dtype == float32); like(a)
""",
    "devs": """\
  - func: devs(Tensor a, Tensor b) -> Tensor
    dispatch: {CPU: devs_cpu}
    fake: check(a.device == b.device, "a and b are on different devices"); like(a)
""",
    "myadd_out": """\
  - func: myadd_out(Tensor a, Tensor b, Tensor(a!) out) -> ()
    dispatch: {CPU: myadd_out_cpu}
""",
}

NAMESPACES = {
    "chkf": ("", ("mixs", "mixd", "devs", "myadd_out")),
    "chks": ('abi: stable\nmin_torch: "2.13"\n', ("mixs", "devs")),
    "chko": ('abi: stable\nmin_torch: "2.10"\n', ("mixd", "myadd_out")),
}

FULL_KERNELS = """\
#include <chkf/chkf.h>

namespace chkf {

at::Tensor mixs_cpu(const at::Tensor& a, const at::Tensor& b) { return a.sub(b); }
at::Tensor mixd_cpu(const at::Tensor& a, const at::Tensor& /*b*/) { return a.clone(); }
at::Tensor devs_cpu(const at::Tensor& a, const at::Tensor& b) { return a.add(b); }
void myadd_out_cpu(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  out.copy_(a.add(b));
}

}  // namespace chkf
"""

STABLE_CLONE = """\
torch::stable::Tensor {name}_cpu(const torch::stable::Tensor& a,
                                 const torch::stable::Tensor& /*b*/) {{
  return torch::stable::clone(a);
}}
"""

STABLE_KERNELS = {
    "chks": """\
#include <chks/chks.h>

#include <torch/csrc/stable/ops.h>

namespace chks {

torch::stable::Tensor mixs_cpu(const torch::stable::Tensor& a, const torch::stable::Tensor& b) {
  return torch::stable::subtract(a, b);
}
""" + STABLE_CLONE.format(name="devs") + "\n}  // namespace chks\n",
    "chko": """\
#include <chko/chko.h>

#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/Exception.h>

namespace chko {

""" + STABLE_CLONE.format(name="mixd") + """
void myadd_out_cpu(const torch::stable::Tensor& a, const torch::stable::Tensor& b,
                   torch::stable::Tensor& out) {
  STD_TORCH_CHECK(a.scalar_type() == torch::headeronly::ScalarType::Float &&
                  b.scalar_type() == torch::headeronly::ScalarType::Float &&
                  out.scalar_type() == torch::headeronly::ScalarType::Float,
                  "chko::myadd_out: float32 tensors only");
  STD_TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && out.is_contiguous() &&
                  a.numel() == b.numel() && a.numel() == out.numel(),
                  "chko::myadd_out: contiguous tensors of one size only");
  const float* x = a.const_data_ptr<float>();
  const float* y = b.const_data_ptr<float>();
  float* z = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    z[i] = x[i] + y[i];
  }
}

}  // namespace chko
""",
}

# Each case: op, arguments (fake tensors: shape, dtype, device), expected message after `<ns>::`.
CASES = [
    ("mixs", [[(2, 3), "float32", "cpu"], [(3, 2), "float32", "cpu"]], "mixs: a and b differ in shape"),
    ("mixs", [[(2, 3), "float32", "cpu"], [(2, 3), "float64", "cpu"]], "mixs: a and b differ in dtype"),
    ("mixd", [[(2, 3), "float32", "cpu"], [(6,), "float32", "cpu"]], "mixd: a and b differ in rank"),
    ("mixd", [[(2, 3), "float64", "cpu"], [(2, 3), "float64", "cpu"]],
     "mixd: expected a.dtype == float32"),
    ("devs", [[(2, 3), "float32", "cpu"], [(2, 3), "float32", "cuda:0"]],
     "devs: a and b are on different devices"),
]

CHECK = textwrap.dedent("""
    import json, torch
    from torch._library.simple_registry import singleton
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    import runtime

    NAMESPACES = %(namespaces)r
    CASES = %(cases)r
    report = {"registered": {}, "fake": {}, "export": {}, "ok": {}}
    for ns, (_, ops) in NAMESPACES.items():
        for op in ops:
            name = f"{ns}::{op}"
            report["registered"][name] = [
                torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta"),
                singleton.find(name).fake_impl.kernel is not None]

    def fake(mode, shape, dtype, device):
        return FakeTensor(mode, torch.empty(shape, dtype=getattr(torch, dtype), device="meta"),
                          torch.device(device))

    def error(fn):
        try:
            fn()
        except Exception as e:
            return type(e).__name__ + ": " + str(e).strip().splitlines()[0]
        return None

    for ns, (_, ops) in NAMESPACES.items():
        for i, (op, args, _) in enumerate(CASES):
            if op not in ops:
                continue
            f = getattr(getattr(torch.ops, ns), op)
            mode = FakeTensorMode()
            with mode:
                report["fake"][f"{ns}::{op}/{i}"] = error(lambda: f(*[fake(mode, *a) for a in args]))
            if all(a[2] == "cpu" for a in args):
                class M(torch.nn.Module):
                    def forward(self, x, y):
                        return f(x, y)
                real = [torch.ones(a[0], dtype=getattr(torch, a[1])) for a in args]
                report["export"][f"{ns}::{op}/{i}"] = error(lambda: torch.export.export(M(), tuple(real)))

    # The Meta kernels of an op returning nothing: traced, exported, and the kernel still runs.
    for ns in ("chkf", "chko"):
        f = getattr(torch.ops, ns).myadd_out
        class Out(torch.nn.Module):
            def forward(self, x, y, out):
                f(x, y, out)
                return out
        x, y, out = torch.ones(4), torch.full((4,), 2.0), torch.empty(4)
        ep = torch.export.export(Out(), (x, y, out))
        with FakeTensorMode() as mode:
            fx, fy, fo = (mode.from_tensor(t) for t in (x, y, out))
            f(fx, fy, fo)
        f(x, y, out)
        compiled = torch.compile(Out(), backend="aot_eager", fullgraph=True)
        res = compiled(x, y, torch.empty(4))
        report["ok"][ns] = [out.tolist(), res.tolist(),
                            ep.module()(x, y, torch.empty(4)).tolist()]
    print("REPORT", json.dumps(report))
""")


def _op_file(ns: str) -> str:
    head, ops = NAMESPACES[ns]
    return f"namespace: {ns}\n{head}ops:\n" + "".join(OPS[o] for o in ops)


def test_which_checks_become_cpp(tmp_path, monkeypatch):
    """Which rules are C++ Meta kernels per ABI, and the stable kernel's checks as generated."""
    monkeypatch.chdir(tmp_path)
    for ns in NAMESPACES:
        (tmp_path / f"{ns}.yaml").write_text(_op_file(ns), encoding="utf-8")
    lib = load_library([str(tmp_path / f"{ns}.yaml") for ns in NAMESPACES])
    cpp = {str(op.name) for op in lib.ops if py_fake.uses_cpp_meta(op)}
    assert cpp == {"chkf::mixs", "chkf::mixd", "chkf::myadd_out", "chko::mixd",
                   "chko::myadd_out"}
    by_name = {str(op.name): op for op in lib.ops}
    mixd = cpp_stable.translate_meta(by_name["chko::mixd"])
    assert mixd is not None and mixd.body == (
        "if (!(a.dim() == b.dim())) {",
        '  throw std::runtime_error("chko::mixd: a and b differ in rank");',
        "}",
        "if (!(a.scalar_type() == torch::headeronly::ScalarType::Float)) {",
        '  throw std::runtime_error("chko::mixd: expected a.dtype == float32");',
        "}",
        "return torch::stable::empty_like(torch::stable::contiguous(a));")
    out = cpp_stable.translate_meta(by_name["chko::myadd_out"])
    assert out is not None and out.body == () and out.decl.startswith("void meta_myadd_out(")
    # Why the others stay Python: the check that needs it.
    assert "compares sizes" in cpp_stable.refused_check(by_name["chks::mixs"]).reason
    assert "compares devices" in cpp_stable.refused_check(by_name["chks::devs"]).reason
    assert cpp_stable.refused_check(by_name["chko::mixd"]) is None


@pytest.mark.e2e
def test_checks_mean_the_same_on_both_abis(tmp_path):
    root = tmp_path / "root"
    scratch.make_root(root, {f"{ns}.yaml": _op_file(ns) for ns in NAMESPACES},
                      {"chkf/kernels.cpp": FULL_KERNELS,
                       **{f"{ns}/kernels.cpp": text for ns, text in STABLE_KERNELS.items()}})
    gen = scratch.generate(root)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    built = scratch.build(root)
    assert built.returncode == 0, built.stdout + built.stderr
    proc = scratch.python(root, CHECK % {"namespaces": NAMESPACES, "cases": CASES}, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.split("REPORT", 1)[1])

    cpp = {"chkf::mixs", "chkf::mixd", "chkf::myadd_out", "chko::mixd", "chko::myadd_out"}
    for name, (has_meta, has_py_fake) in report["registered"].items():
        # (register_fake also registers a Meta kernel, which calls the Python fake)
        assert has_meta and has_py_fake == (name not in cpp), name

    for kind, n in (("fake", len(CASES)), ("export", len(CASES) - 1)):
        by_case: dict[str, dict[str, str]] = {}
        for key, got in report[kind].items():
            ns, case = key.split("::", 1)
            want = f"{ns}::{CASES[int(case.split('/')[1])][2]}"
            assert got is not None and want in got, (kind, key, got)
            by_case.setdefault(case, {})[ns] = got.replace(f"{ns}::", "<ns>::")
        # Every case ran on the full ABI and on a stable namespace, with the same text.
        assert len(by_case) == n, (kind, by_case)
        for case, texts in by_case.items():
            assert "chkf" in texts and {"chks", "chko"} & set(texts), (kind, case, texts)
            assert len(set(texts.values())) == 1, (kind, case, texts)
    for ns, (eager, compiled, exported) in report["ok"].items():
        assert eager == compiled == exported == [3.0] * 4, ns
