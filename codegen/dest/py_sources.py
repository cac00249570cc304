"""Python functions named in the op file (kernels, fakes, batching rules): found and read
without importing anything, and checked against the schema (parameters and defaults).
"""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import os
import re
import sys
from pathlib import Path

from codegen import enums
from codegen.api import python as P
from codegen.config import Project
from codegen.diagnostics import Diagnostics, Loc, did_you_mean
from codegen.model import Argument, FunctionSchema, PyRef
from codegen.pysource import module_level_names


def python_roots(project: Project) -> list[Path]:
    """Where modules named in the op files are looked up: the project's `python_roots`, the
    working directory, then the import path."""
    return [*map(Path, project.python_roots), Path.cwd(), *map(Path, sys.path)]


def find_module_source(module: str, roots: list[Path]) -> Path | None:
    """The source file of `module` below one of `roots` (python_roots), found without importing
    anything (an import could run a package's `__init__`, such as runtime's, which loads the
    built library)."""
    parts = module.split(".")
    for root in roots:
        # Strings while searching (a few stats per root, a Path each would cost more).
        base = os.path.join(root, *parts)
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(candidate):
                return Path(candidate)
    return None


class PyModule:
    """What the checks read of a Python module's source: its top-level functions (the last
    binding of a name wins, as at import: a def rebound later is not the function) and its
    constants, which a default may name."""

    def __init__(self, path: Path, text: str, tree: ast.Module) -> None:
        self.path = path
        self.text = text
        self.tree = tree
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        for n in tree.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[n.name] = n
            else:
                # A later statement that binds the name (`f = wrap(f)`, an import) decides what
                # import finds: the function defined before is no longer it.
                for name in module_level_names([n])[0]:
                    self.functions.pop(name, None)

    def method(self, path: str) -> tuple[ast.FunctionDef, bool] | None:
        """`Class.name` of a top-level class (the last binding of both names wins, as at
        import) that Python calls as it is written: a plain function looked up on the class, a
        staticmethod, or a classmethod (then True: its first parameter is bound). None for
        anything else (nested classes, other decorators, inherited or assigned attributes)."""
        cls_name, _, name = path.partition(".")
        if "." in name:
            return None
        cls = None
        for n in self.tree.body:
            if isinstance(n, ast.ClassDef) and n.name == cls_name:
                cls = n
            elif cls_name in module_level_names([n])[0]:
                cls = None
        if cls is None or cls.decorator_list:
            return None
        fn = None
        for n in cls.body:
            if isinstance(n, ast.FunctionDef) and n.name == name:
                fn = n
            elif name in module_level_names([n])[0]:
                fn = None
        if fn is None:
            return None
        decorators = [d.id if isinstance(d, ast.Name) else None for d in fn.decorator_list]
        if decorators in ([], ["staticmethod"]):
            return fn, False
        if decorators == ["classmethod"] and (fn.args.posonlyargs or fn.args.args):
            return fn, True
        return None

    @functools.cached_property
    def constants(self) -> dict[str, ast.expr]:
        """Names bound exactly once in the whole module (any store, import, def, class or
        global counts), by a top-level `NAME = value`. Walks the whole tree: computed only when
        a default names something."""
        stores: dict[str, int] = {}
        for n in ast.walk(self.tree):
            names: list[str] = []
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                names = [n.id]
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                names = [(a.asname or a.name).split(".")[0] for a in n.names]
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [n.name]
            elif isinstance(n, (ast.Global, ast.Nonlocal)):
                names = n.names * 2
            for name in names:
                stores[name] = stores.get(name, 0) + 1
        constants = {}
        for n in self.tree.body:
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                if len(targets) == 1 and isinstance(targets[0], ast.Name) and \
                        stores.get(targets[0].id) == 1:
                    constants[targets[0].id] = n.value
        return constants


@functools.lru_cache(maxsize=256)
def _parse_module(path: str, text: str) -> PyModule:
    """A module parsed once per path and content: a library names the same kernel module once
    per op. Callers must not modify what it holds."""
    return PyModule(Path(path), text, ast.parse(text, filename=path))


class PySources:
    """Python modules named in the op files, looked up and parsed once per run."""

    def __init__(self, roots: list[Path], configured: tuple[str, ...] | None = None) -> None:
        self.roots = roots      # python_roots(project)
        # A project's 'python-roots' (None without [tool.opgen]), for messages.
        self.configured = configured
        self._found: dict[str, Path | None] = {}
        self.unreadable: set[Path] = set()     # reported once, not once per kernel named in it

    def find(self, module: str) -> Path | None:
        if module not in self._found:
            self._found[module] = find_module_source(module, self.roots)
        return self._found[module]

    def parse(self, path: Path) -> PyModule:
        """Raises SyntaxError, UnicodeDecodeError or OSError."""
        return _parse_module(str(path), path.read_text(encoding="utf-8"))


def ref_part(ref: PyRef, *, module: bool) -> Loc:
    """Where the module (`module`) or the function of `ref` is written: within `ref.loc`, past a
    quote when the value is quoted; all of `ref.loc` where the value is written otherwise (an
    escape inside quotes)."""
    loc, text = ref.loc, str(ref)
    pad = loc.length - len(text)
    if pad not in (0, 2):
        return loc
    start, length = (0, len(ref.module)) if module else (len(ref.module) + 1, len(ref.name))
    return Loc(loc.path, loc.line, loc.col + pad // 2 + start, length)


def check_signature(ref: PyRef, schema: FunctionSchema, diags: Diagnostics, what: str, *,
                    leading: int = 0, sources: PySources) -> None:
    """Check that the function `ref` can be called the way the dispatcher calls it: the op's
    positional arguments by position (those with defaults may be left out, so the function needs
    defaults there too), keyword-only ones by name, and that its defaults are the schema's.
    `leading` parameters come first (a batching rule's `info, in_dims`). Functions whose source
    cannot be read (compiled modules) pass."""
    path = sources.find(ref.module)
    if path is None:
        own = [r for r in sources.configured or () if r != "."]
        where = (f"below 'python-roots' of [tool.opgen] ({', '.join(own)}), the project root"
                 if own else "from the project root" if sources.configured is not None
                 else "from the current directory")
        diags.error(ref_part(ref, module=True),
                    f"cannot find Python module '{ref.module}' of {what} {ref}",
                    f"it is looked up {where} and the import path (sys.path), as `import` "
                    "would")
        return
    try:
        module = sources.parse(path)
    except (SyntaxError, UnicodeDecodeError, OSError) as e:
        if path not in sources.unreadable:
            sources.unreadable.add(path)
            _unreadable(path, e, ref, what, diags)
        return
    if "." in ref.name:
        method = module.method(ref.name)
        if method is None:
            return  # not a plain, static or class method of a class defined there
        fn, bound = method
        problem = _signature_problem(_unbound(fn.args, bound), schema, leading)
        if problem:
            params = ["info", "in_dims"][:leading] + P.parameters(schema)
            first = ["cls"] if bound else []
            plain = [*fn.args.posonlyargs, *fn.args.args]
            if not bound and fn.decorator_list == [] and plain and plain[0].arg == "self":
                hint = (f"{ref.name} is looked up on the class, not on an instance, so 'self' "
                        f"takes the op's first argument; make it a @staticmethod without 'self': "
                        f"`def {fn.name}(" + ", ".join(params) + ")`")
            else:
                hint = f"expected a method like `def {fn.name}(" + ", ".join(first + params) + ")`"
            diags.error(ref.loc, f"{what} {ref} cannot take the arguments of {schema.name}: "
                        f"{problem}", hint)
            return
        as_called = copy.copy(fn)      # a copy: the parsed module is shared
        as_called.args = _unbound(fn.args, bound)
        _check_defaults(ref, as_called, module, schema, diags, what, leading)
        return
    fn = module.functions.get(ref.name)
    if fn is None:

        names, star = module_level_names(module.tree.body)
        if ref.name not in names and not star:
            diags.error(ref_part(ref, module=False),
                        f"{_shown(path)} defines no function '{ref.name}'",
                        did_you_mean(ref.name, sorted(names)))
        return  # assigned or imported under that name: not checkable from source
    if isinstance(fn, ast.AsyncFunctionDef):
        diags.error(ref.loc, f"{what} {ref} is an `async def`: calling it returns a coroutine, "
                    f"not what {schema.name} returns", "make it a plain `def`")
        return
    problem = _signature_problem(fn.args, schema, leading)
    if problem:
        diags.error(ref.loc, f"{what} {ref} cannot take the arguments of {schema.name}: {problem}",
                    f"expected a function like `def {ref.name}("
                    + ", ".join(["info", "in_dims"][:leading] + P.parameters(schema)) + ")`")
        return
    _check_defaults(ref, fn, module, schema, diags, what, leading)


def _unbound(args: ast.arguments, bound: bool) -> ast.arguments:
    """A classmethod's parameters as its callers see them: without the first (`cls`)."""
    if not bound:
        return args
    posonly = args.posonlyargs[1:] if args.posonlyargs else []
    plain = args.args if args.posonlyargs else args.args[1:]
    return ast.arguments(posonlyargs=posonly, args=plain, vararg=args.vararg,
                         kwonlyargs=args.kwonlyargs, kw_defaults=args.kw_defaults,
                         kwarg=args.kwarg,
                         defaults=args.defaults[-(len(posonly) + len(plain)):]
                         if posonly or plain else [])


def _unreadable(path: Path, e: Exception, ref: PyRef, what: str, diags: Diagnostics) -> None:
    shown = _shown(path)
    if isinstance(e, SyntaxError) and e.lineno:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            diags.add_source(shown, path.read_text(encoding="utf-8"))
        col = e.offset or 1
        length = (e.end_offset - col) if e.end_lineno == e.lineno and e.end_offset else 1
        diags.error(Loc(shown, e.lineno, col, max(1, length)), f"{e.msg}, so opgen cannot read "
                    f"the kernels the op files name in {shown}",
                    f"{ref.loc} names {what} {ref} in it")
        return
    reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    diags.error(ref.loc, f"cannot read {what} {ref}: {shown} cannot be read ({reason})")


def _shown(path: Path) -> str:
    """`path` relative to the current directory when it lies below it (as messages show files)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _signature_problem(args: ast.arguments, schema: FunctionSchema, leading: int) -> str | None:
    params = [*args.posonlyargs, *args.args]
    defaults_from = len(params) - len(args.defaults)
    positional = schema.positional
    need = leading + len(positional)
    if args.vararg is None and len(params) < need:
        return (f"it takes {len(params)} positional parameter{'s' if len(params) != 1 else ''}, "
                f"the op passes up to {need}")
    droppable = P.python_defaults(schema)  # only trailing defaults can be left out
    for i, a in enumerate(positional):
        j = leading + i
        if a.default is not None and droppable[i] and j < len(params) and j < defaults_from:
            return (f"parameter '{params[j].arg}' needs a default: the dispatcher leaves out "
                    f"'{a.name}' when it equals its default ({a.default})")
    for p in params[need:defaults_from]:
        return f"parameter '{p.arg}' has no default and no argument of the op fills it"
    names = {p.arg for p in params[need:]} | {p.arg for p in args.kwonlyargs}
    for a in schema.kwarg_only:
        if a.name not in names and args.kwarg is None:
            return f"it has no parameter '{a.name}' for the keyword-only argument"
    kw_names = {a.name for a in schema.kwarg_only}
    for p, d in zip(args.kwonlyargs, args.kw_defaults):
        if d is None and p.arg not in kw_names:
            return f"keyword-only parameter '{p.arg}' is not an argument of the op"
    return None


def _default_value(node: ast.expr, module: PyModule | None, depth: int = 0) -> tuple | None:
    """A comparable form of a default written in Python, or None when it is not one this check
    reads (a call, an expression): literals, tuples and lists of them (the same: the dispatcher
    hands a list to a function whichever was the default), `torch.<dtype, layout or memory
    format>`, `torch.device("...")` (a device default is its string), and module constants
    naming one of these. Numbers keep their type: 1 is not 1.0 and True is not 1, because the
    function computes with the value it gets, and `torch.full(size, 1)` is not
    `torch.full(size, 1.0)`."""
    if depth > 8:
        return None
    if isinstance(node, ast.Constant):
        return ("value", type(node.value).__name__, repr(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and \
            isinstance(node.operand, ast.Constant) and \
            type(node.operand.value) in (int, float, complex):
        number: int | float | complex = node.operand.value    # type: ignore[assignment]
        number = -number if isinstance(node.op, ast.USub) else number
        return ("value", type(number).__name__, repr(number))
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_default_value(e, module, depth + 1) for e in node.elts]
        return None if any(i is None for i in items) else ("sequence", tuple(items))
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
            node.value.id == "torch":
        return ("torch", enums.DTYPE_ALIASES.get(node.attr, node.attr))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            isinstance(node.func.value, ast.Name) and node.func.value.id == "torch" and \
            node.func.attr == "device" and len(node.args) == 1 and not node.keywords and \
            isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return ("value", "str", repr(node.args[0].value))
    if isinstance(node, ast.Name) and module is not None and node.id in module.constants:
        return _default_value(module.constants[node.id], module, depth + 1)
    return None


@functools.lru_cache(maxsize=1024)
def _expected_value(expr: str) -> tuple | None:
    """`_default_value` of a default as codegen.api.python writes it."""
    return _default_value(ast.parse(expr, mode="eval").body, None)


def _python_defaults(args: ast.arguments, schema: FunctionSchema,
                     leading: int) -> list[tuple[Argument, ast.arg, ast.expr]]:
    """(schema argument, the function's parameter for it, that parameter's default) for every
    argument whose parameter has a default."""
    params = [*args.posonlyargs, *args.args]
    defaults_from = len(params) - len(args.defaults)

    def default(j: int) -> ast.expr | None:
        return args.defaults[j - defaults_from] if j >= defaults_from else None

    out: list[tuple[Argument, ast.arg, ast.expr | None]] = []
    positional = schema.positional
    for i, a in enumerate(positional):
        if leading + i < len(params):
            out.append((a, params[leading + i], default(leading + i)))
    by_name = {p.arg: (p, default(j)) for j, p in enumerate(params)
               if j >= leading + len(positional)}
    by_name.update({p.arg: (p, d) for p, d in zip(args.kwonlyargs, args.kw_defaults)})
    for a in schema.kwarg_only:
        if a.name in by_name:
            out.append((a, *by_name[a.name]))
    return [(a, p, d) for a, p, d in out if d is not None]


def _check_defaults(ref: PyRef, fn: ast.FunctionDef | ast.AsyncFunctionDef, module: PyModule,
                    schema: FunctionSchema, diags: Diagnostics, what: str, leading: int) -> None:
    """Each default of the function must be the schema's: the dispatcher leaves out an argument
    that equals its schema default, and the function then runs with its own."""
    for arg, param, node in _python_defaults(fn.args, schema, leading):
        if arg.default is None:
            continue
        try:
            expected = P.default_expr(arg.default, arg.type)
        except P.Unsupported:
            continue
        want = _expected_value(expected)
        got = _default_value(node, module)
        if got is None or want is None or got == want:
            continue
        written = ast.get_source_segment(module.text, node) or ast.unparse(node)
        kinds = ""
        numbers = {"int": "an int", "float": "a float", "bool": "a bool", "complex": "a complex"}
        if got[0] == want[0] == "value" and got[1] != want[1] and \
                got[1] in numbers and want[1] in numbers:
            kinds = f" ({numbers[got[1]]}; the schema's is {numbers[want[1]]})"
        shown = _shown(module.path)
        diags.add_source(shown, "\n".join(_py_lines(module.text)).translate(_PY_NOT_BREAKS))
        diags.error(_py_loc(shown, module.text, node),
                    f"parameter '{param.arg}' of {what} {ref} defaults to {written}{kinds}, but "
                    f"{schema.name} declares {arg.name}={arg.default}",
                    f"a call that leaves out '{arg.name}' runs the function with its own default; "
                    f"write `{param.arg}={expected}` (the op file names this {what} at {ref.loc})")


# Python ends lines at \r\n, \r and \n only; str.splitlines, which draws the source lines of
# diagnostics, also at these, so they are shown as U+FFFD (columns do not move).
_PY_NOT_BREAKS = {c: "\ufffd" for c in (0x0B, 0x0C, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029)}


def _py_lines(text: str) -> list[str]:
    return re.split(r"\r\n|\r|\n", text)


def _py_loc(path: str, text: str, node: ast.expr) -> Loc:
    """Where `node` is in Python source `text` (ast columns count UTF-8 bytes; ours characters)."""
    lines = _py_lines(text)
    line = lines[node.lineno - 1].encode("utf-8") if node.lineno <= len(lines) else b""
    col = len(line[:node.col_offset].decode("utf-8", "replace"))
    length = 1
    if node.end_lineno == node.lineno and node.end_col_offset is not None:
        length = len(line[node.col_offset:node.end_col_offset].decode("utf-8", "replace"))
    return Loc(path, node.lineno, col + 1, max(1, length))
