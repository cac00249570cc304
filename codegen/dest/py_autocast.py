"""Autocast policies, registered with `torch.library.register_autocast`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.dest.py_common import Section, q, qualname
from codegen.model import Op

if TYPE_CHECKING:
    from codegen.dest.py_common import ModuleScope


def autocast(m: ModuleScope, op: Op, sec: Section) -> None:
    spec = op.autocast
    if spec is None:
        return
    if op.schema.kwarg_only:
        m.diags.error(spec.loc, "autocast rules cannot cover ops with keyword-only "
                         f"arguments ('{op.schema.kwarg_only[0].name}')",
                         "torch.library.register_autocast passes positional arguments only; "
                         "make them positional")
        return
    if op.schema.mutable_arguments:
        m.diags.error(spec.loc, f"autocast casts the inputs of functional ops; {op.name} "
                         "mutates its arguments")
        return
    sec.registrations.append(f"torch.library.register_autocast({q(qualname(op))}, "
                             f"{q(spec.device_type)}, torch.{spec.cast_inputs}, lib=_lib)")
