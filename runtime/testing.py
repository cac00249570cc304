"""`codegen.testing` for a built library: `from runtime import testing` loads every built op
library first (importing the `runtime` package does), then gives the sample checks.

To try op files whose kernels are all Python without building anything (other namespaces
included), import `codegen.testing` instead: it loads nothing until asked
(`load_python_library`).
"""

from codegen.testing import *  # noqa: F401,F403
from codegen.testing import __all__  # noqa: F401
