"""AOTInductor C shims (Note [AOTInductor C shims] in codegen/dest/cpp_aoti.py): what the
generator carries and skips, and a model compiled with `aoti_compile_and_package` calling the
example's ops through the generated shims, against eager and against the proxy executor."""

from __future__ import annotations

import zipfile

import pytest

from codegen.dest import cpp_aoti
from codegen.load import load_library
from tests.conftest import ROOT


def test_plan_carries_and_skips(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    lib = load_library(sorted(str(p) for p in (ROOT / "schemas").glob("*.yaml")
                              if p.name not in ("opgen.lock", "sample_failures.yaml")))
    shims, skipped = cpp_aoti.plan(lib)
    names = {s.op.name.name for s in shims["exops"]}
    assert {"scaled_add", "moments", "weighted_sum", "pad_end", "smooth_clamp"} <= names
    assert "exstable" not in shims    # the stable ABI links no libtorch C++
    why = {str(op.name): reason for op, reason in skipped}
    assert why["exops::soft_shrink_"] == "it mutates an argument"
    assert why["exops::gaussian_window"] == (
        "argument 'dtype' has type ScalarType?, which the C shim ABI does not carry")
    moments = next(s for s in shims["exops"] if s.op.name.name == "moments")
    assert cpp_aoti.declaration("cpu", moments) == (
        "AOTITorchError aoti_torch_cpu_moments(AtenTensorHandle a_self, const int64_t* a_dim, "
        "int64_t a_dim_len_, int32_t a_keepdim, int64_t a_correction, AtenTensorHandle* r0, "
        "AtenTensorHandle* r1)")


def test_torch_shim_names_are_skipped() -> None:
    # torch's own shim for aten::add would be the same symbol
    assert "add" in cpp_aoti._torch_shim_names()
    assert "add_Tensor" in cpp_aoti._torch_shim_names()


def _compile(tmp_path, name: str, shims: bool):
    import torch
    from torch._inductor import config

    from runtime import _aoti

    class Model(torch.nn.Module):
        def forward(self, x, y):
            a = torch.ops.exops.scaled_add(x, y, alpha=2.0)
            mean, var = torch.ops.exops.moments(a, [1])
            return torch.ops.exops.smooth_clamp(a * 1.5, 0.7), mean + var

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    with config.patch({"aot_inductor.custom_ops_to_c_shims": {}}):
        if shims:
            _aoti.use_c_shims()
        ep = torch.export.export(Model(), (x, y))
        path = torch._inductor.aoti_compile_and_package(
            ep, package_path=str(tmp_path / f"{name}.pt2"))
    with zipfile.ZipFile(path) as z:
        source = "".join(z.read(n).decode() for n in z.namelist() if n.endswith(".cpp"))
    compiled = torch._inductor.aoti_load_package(path)
    return source, compiled(x, y), Model()(x, y)


@pytest.mark.slow
def test_aoti_package_with_and_without_shims(testing, tmp_path) -> None:
    import torch

    source, out, ref = _compile(tmp_path, "shims", shims=True)
    for op in ("scaled_add", "moments", "smooth_clamp"):
        assert f"aoti_torch_cpu_{op}(" in source
    assert "aoti_torch_proxy_executor_call_function(" not in source
    assert all(torch.equal(a, b) for a, b in zip(out, ref))

    source, out, ref = _compile(tmp_path, "proxy", shims=False)
    assert "aoti_torch_cpu_scaled_add" not in source
    assert source.count("aoti_torch_proxy_executor_call_function(") == 3
    assert all(torch.equal(a, b) for a, b in zip(out, ref))


@pytest.mark.slow
def test_shim_package_loads_in_a_fresh_process_after_expose_libraries(testing, tmp_path) -> None:
    """The model links no op library: a process that imported the package but did not expose its
    libraries cannot resolve the shims; one that did runs the model."""
    import subprocess
    import sys

    _compile(tmp_path, "fresh", shims=True)
    script = ("import sys, torch, runtime\n"
              "from runtime import _aoti\n"
              "if sys.argv[1] == 'expose':\n"
              "    _aoti.expose_libraries()\n"
              f"f = torch._inductor.aoti_load_package({str(tmp_path / 'fresh.pt2')!r})\n"
              "x = torch.randn(4, 8)\n"
              "print(f(x, x)[0].shape)\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run([sys.executable, "-c", script, "expose"], capture_output=True,
                        text=True, env=env)
    assert ok.returncode == 0 and "torch.Size([4, 8])" in ok.stdout, ok.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-c", script, "none"], capture_output=True, text=True,
                         env=env)
    assert bad.returncode != 0 and "undefined symbol: aoti_torch_cpu_" in bad.stderr


def test_use_c_shims_refuses_a_shim_name_taken_by_another_namespace(testing) -> None:
    import torch
    from torch._inductor import config

    from runtime import _aoti

    lib = torch.library.Library("aoti_clash", "FRAGMENT")
    lib.define("smooth_clamp(Tensor self, float limit=1.0) -> Tensor")
    other = torch.ops.aoti_clash.smooth_clamp.default
    with config.patch({"aot_inductor.custom_ops_to_c_shims": {other: ["AOTITorchError f()"]}}):
        with pytest.raises(RuntimeError, match="exops::smooth_clamp and aoti_clash::smooth_clamp "
                                               "would have the same name"):
            _aoti.use_c_shims()
    with config.patch({"aot_inductor.custom_ops_to_c_shims": {}}):
        _aoti.use_c_shims()
        assert config.aot_inductor.custom_ops_to_c_shims[
            torch.ops.exops.smooth_clamp.default] == list(
                _aoti.C_SHIMS[("exops", "smooth_clamp")])
