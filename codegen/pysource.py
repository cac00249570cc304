"""What a Python module's source binds at module level, read without running it: a kernel named
`module:function` in an op file must exist before `import` would find out the hard way."""

from __future__ import annotations

import ast
from typing import Iterable


def module_level_names(body: Iterable[ast.stmt]) -> tuple[set[str], bool]:
    """(the names the statements bind at module level, whether a `from x import *` makes the set
    open). Looks into `if`/`try`/`with`/loops, whose bodies run at module level too."""
    names: set[str] = set()
    star = False
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    star = True
                else:
                    names.add(alias.asname or alias.name.partition(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            names.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    names.update(n.id for n in ast.walk(item.optional_vars)
                                 if isinstance(n, ast.Name))
        # Names bound by assignment expressions anywhere at module level.
        for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                           ast.ClassDef, ast.Lambda)) else ():
            if isinstance(sub, ast.NamedExpr) and isinstance(sub.target, ast.Name):
                names.add(sub.target.id)
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(node, field, None)
            if isinstance(inner, list) and not isinstance(
                    node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                n, s = module_level_names(inner)
                names |= n
                star |= s
        for handler in getattr(node, "handlers", ()) or ():
            if handler.name:
                names.add(handler.name)
            n, s = module_level_names(handler.body)
            names |= n
            star |= s
        if isinstance(node, ast.Match):
            for case in node.cases:
                n, s = module_level_names(case.body)
                names |= n
                star |= s
    return names, star
