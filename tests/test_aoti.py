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
    assert "exops::gaussian_window" not in why
    moments = next(s for s in shims["exops"] if s.op.name.name == "moments")
    assert cpp_aoti.declaration("cpu", moments) == (
        "AOTITorchError aoti_torch_cpu_moments(AtenTensorHandle a_self, const int64_t* a_dim, "
        "int64_t a_dim_len_, int32_t a_keepdim, int64_t a_correction, AtenTensorHandle* r0, "
        "AtenTensorHandle* r1)")
    # ScalarType?, Layout? and Device? as torch's own factory shims take them
    # (aoti_torch_cpu_randn: int32_t* dtype, int32_t* layout, int32_t* device, int32_t
    # device_index_, int32_t* pin_memory)
    window = next(s for s in shims["exops"] if s.op.name.name == "gaussian_window")
    assert cpp_aoti.declaration("cpu", window) == (
        "AOTITorchError aoti_torch_cpu_gaussian_window(int64_t a_size, double a_sigma, "
        "int32_t* a_dtype, int32_t* a_layout, int32_t* a_device, int32_t a_device_index_, "
        "int32_t* a_pin_memory, AtenTensorHandle* r0)")


def test_c_parameters_sharing_a_name_keep_the_proxy_executor(tmp_path, monkeypatch) -> None:
    """An int[] `a` is the C parameters `a_a` and `a_a_len_`, a Device `d` is `a_d` and
    `a_d_index_`: an argument named `a_len_` or `d_index_` beside them is skipped (the shim would
    not compile), the others get a shim."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clash.yaml").write_text(
        "namespace: clash\n"
        "ops:\n"
        "  - func: lens(Tensor t, int[] a, int a_len_) -> Tensor\n"
        "    dispatch: {CPU: lens_cpu}\n"
        "  - func: places(Tensor t, Device? d, int d_index_) -> Tensor\n"
        "    dispatch: {CPU: places_cpu}\n"
        "  - func: fine(Tensor t, Device d, int d_len_, ScalarType s, MemoryFormat m) -> Tensor\n"
        "    dispatch: {CPU: fine_cpu}\n", encoding="utf-8")
    shims, skipped = cpp_aoti.plan(load_library(["clash.yaml"]))
    assert {str(op.name): why for op, why in skipped} == {
        "clash::lens": "two of its arguments would both be the C parameter 'a_a_len_'",
        "clash::places": "two of its arguments would both be the C parameter 'a_d_index_'"}
    assert [cpp_aoti.declaration("cpu", s) for s in shims["clash"]] == [
        "AOTITorchError aoti_torch_cpu_fine(AtenTensorHandle a_t, int32_t a_d, int32_t a_d_index_, "
        "int64_t a_d_len_, int32_t a_s, int32_t a_m, AtenTensorHandle* r0)"]


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
            # correction is not its default: torch's proxy executor reads the exported node,
            # which leaves out a keyword argument equal to its default, while the wrapper passes
            # every argument (the call fails with "Mismatch between ints consumed and num_ints")
            mean, var = torch.ops.exops.moments(a, [1], correction=0)
            window = torch.ops.exops.gaussian_window(8, 1.5, dtype=torch.float64, device="cpu")
            return torch.ops.exops.smooth_clamp(a * 1.5, 0.7), mean + var, window

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
    for op in ("scaled_add", "moments", "smooth_clamp", "gaussian_window"):
        assert f"aoti_torch_cpu_{op}(" in source
    assert "aoti_torch_proxy_executor_call_function(" not in source
    assert out[2].dtype == torch.float64
    assert all(torch.equal(a, b) for a, b in zip(out, ref))

    source, out, ref = _compile(tmp_path, "proxy", shims=False)
    assert "aoti_torch_cpu_scaled_add" not in source
    assert source.count("aoti_torch_proxy_executor_call_function(") == 4
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
