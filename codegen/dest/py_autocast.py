"""Autocast policies, registered with `torch.library.register_autocast`.
"""

from __future__ import annotations

from codegen.dest.py_common import Section, q, qualname
from codegen.model import Op


def autocast(op: Op, sec: Section) -> None:
    spec = op.autocast
    if spec is None:
        return
    # codegen.verify refuses keyword-only and mutable arguments.
    sec.registrations.append(f"torch.library.register_autocast({q(qualname(op))}, "
                             f"{q(spec.device_type)}, torch.{spec.cast_inputs}, lib=_lib)")
