"""Python kernels (dispatch values `package.module:function`): each registered with
`Library.impl`, so the op calls the function through the dispatcher with no wrapper in between.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.dest.py_common import Section, op_name, q
from codegen.dest.py_sources import check_signature
from codegen.model import DispatchKey, Op, PyRef

# Dispatch keys a Python kernel is registered under, as `Library.impl` spells them.
PY_KERNEL_KEYS = {
    DispatchKey.CPU: "CPU",
    DispatchKey.CUDA: "CUDA",
    DispatchKey.Meta: "Meta",
    DispatchKey.CompositeImplicitAutograd: "CompositeImplicitAutograd",
    DispatchKey.CompositeExplicitAutograd: "CompositeExplicitAutograd",
}

if TYPE_CHECKING:
    from codegen.dest.py_common import ModuleScope


def kernels(m: ModuleScope, op: Op, sec: Section) -> None:
    for key, kernel in op.dispatch:
        if isinstance(kernel, PyRef):
            check_signature(kernel, op.schema, m.diags, "kernel", sources=m.sources)
            sec.registrations.append(
                f"_lib.impl({q(op_name(op))}, {m.ref_expr(kernel)}, "
                f"{q(PY_KERNEL_KEYS[key])})")
