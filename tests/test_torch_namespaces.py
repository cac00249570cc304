"""codegen/torch_namespaces.json, the namespaces and ops torch defines, is the pinned torch's
(Note [Torch namespaces]); refresh with `python -m codegen.torch_namespaces --refresh`."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from codegen import torch_namespaces
from tests import scratch


@scratch.on_pinned_torch()
def test_record_matches_the_installed_torch():
    # A fresh interpreter: this one may have loaded op libraries that add namespaces.
    proc = subprocess.run(
        [sys.executable, "-c",
         "import json; from codegen.torch_namespaces import current; print(json.dumps(current()))"],
        cwd=scratch.REPO, env=scratch.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    live = json.loads(proc.stdout)
    recorded = json.loads((scratch.REPO / "codegen" / torch_namespaces.RECORD_FILE).read_text())
    if live["torch"] == recorded["torch"] and "+cpu" not in torch.__version__:
        # The record comes from the CPU build of the pinned torch. A CUDA build registers
        # kernels of its own in `_native` (numbered per build: `bmm_triton_0`), so there only
        # the namespace itself is compared.
        for ops in (live["namespaces"], recorded["namespaces"]):
            if "_native" in ops:
                ops["_native"] = []
    assert live == recorded, "run `python -m codegen.torch_namespaces --refresh`"


def test_the_namespaces_the_issue_names_are_torchs():
    for ns in ("aten", "prims", "quantized", "prim"):
        assert torch_namespaces.is_torch_namespace(ns), ns
    assert "add.Tensor" in torch_namespaces.recorded()["aten"]
    assert not torch_namespaces.is_torch_namespace("exops")
