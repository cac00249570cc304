"""Autocast policies, registered with `torch.library.register_autocast`.
"""

from __future__ import annotations

from codegen.dest.py_common import ModuleScope, Section, op_name, q, qualname
from codegen.model import AUTOCAST_DTYPE, Op


def autocast(m: ModuleScope, op: Op, sec: Section) -> None:
    spec = op.autocast
    if spec is None:
        return
    # codegen.verify refuses keyword-only and mutable arguments.
    if spec.cast_inputs == AUTOCAST_DTYPE:
        m.helpers.add("autocast_to_active")
        sec.registrations.append(f"_autocast_to_active({q(qualname(op))}, {q(op_name(op))}, "
                                 f"{q(spec.device_type)})")
        return
    sec.registrations.append(f"torch.library.register_autocast({q(qualname(op))}, "
                             f"{q(spec.device_type)}, torch.{spec.cast_inputs}, lib=_lib)")
