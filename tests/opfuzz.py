"""Fuzzing op files end to end: a harness that runs the CLI in-process on one input, the oracles
every input must satisfy, and the mutators that make inputs (tests/test_fuzz_opfiles.py drives
them with hypothesis).

For every input:
- `check`, `list` and `generate` never raise out of `codegen.__main__.main` and never print a
  traceback or an internal error; `check` exits 0 or 1;
- when `check` exits 0, `generate` exits 0, and what it wrote is sound: no raw control character
  (CR, NUL, ...), Python modules compile, stubs parse, no line of any file starts with a piece of
  an op file's name that followed a line break, no module-level name is bound twice or shadows a
  builtin the module uses, every integer literal fits int64, generated Python reaches no module
  outside torch through `torch.` and no dunder attribute the pristine example's output does not
  use, Python kernels' defaults equal the schema's, torch accepts every schema the way the
  generated C++ registers it (`TORCH_LIBRARY` or a fragment), and every op is reachable as
  `runtime.ops.<name>`;
- optionally (the slow tests), the generated C++ passes `g++ -fsyntax-only -Wall -Wextra` with
  no warning, compiled against torch's headers through a precompiled header.

A failure raises a `FuzzFailure` subclass named after the oracle that failed, so hypothesis tells
different bugs apart and minimizes each.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
import types
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
INT64_MAX = 2**63 - 1

# Cases run (in-process CLI) and C++ units compiled in this process; printed by conftest's summary.
STATS = {"cases": 0, "accepted": 0, "compiled": 0, "seconds": 0.0}


# --- inputs ----------------------------------------------------------------------------------

@dataclass
class Case:
    """One input: op files under schemas/ (name -> bytes) and Python modules beside them
    (relative path -> text), found from the working directory as kernels are."""

    files: dict[str, bytes]
    modules: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        parts = [f"{_short(n)}: {_short(b)}" for n, b in self.files.items()]
        parts += [f"module {n!r}: {_short(t)}" for n, t in self.modules.items()]
        return "Case(" + ", ".join(parts) + ")"

    def _repr_pretty_(self, p, cycle) -> None:  # what hypothesis prints for a falsifying example
        p.text(repr(self))


def _short(data: str | bytes, limit: int = 1500) -> str:
    """repr(data), runs of one character shown with their length, cut at `limit` characters."""
    text = re.sub(r"(.)\1{29,}", lambda m: f"{m.group(1) * 3}<x{len(m.group())}>", repr(data))
    return text if len(text) <= limit else text[:limit] + f"...<{len(data)} in all>"


# --- failures --------------------------------------------------------------------------------

class FuzzFailure(AssertionError):
    """An oracle failed; subclasses name the oracle (hypothesis keeps one minimal example each)."""


_KINDS: dict[str, type] = {}


def failure(kind: str, message: str) -> FuzzFailure:
    cls = _KINDS.get(kind)
    if cls is None:
        cls = _KINDS[kind] = type(re.sub(r"\W", "_", kind), (FuzzFailure,), {})
    return cls(message)


# --- running the CLI -------------------------------------------------------------------------

def cli(argv: list[str]) -> tuple[int, str]:
    """`python -m codegen ARGV` in-process: (exit status, stdout + stderr). Any exception that
    escapes main() is a failure: user input must never produce one."""
    __tracebackhide__ = True
    from codegen.__main__ import main

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = main(argv)
    except SystemExit as e:  # argparse
        rc = e.code if isinstance(e.code, int) else 2
    except Exception as e:  # noqa: BLE001  (the oracle: nothing may escape)
        tb = e.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f" at {Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}" if tb else ""
        raise failure(f"uncaught_{type(e).__name__}",
                      f"`{' '.join(argv[:1])}` raised {type(e).__name__}: {_clip(str(e))}{where}"
                      ) from None
    text = out.getvalue()
    for marker in ("Traceback (most recent call last)", "internal error"):
        if marker in text:
            raise failure("traceback_printed", f"`{argv[0]}` printed {marker!r}:\n{_clip(text)}")
    return rc, text


def _clip(text: str, limit: int = 800) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


@contextlib.contextmanager
def case_root(case: Case):
    """A fresh directory holding the case (a new path per case: nothing cached by path leaks
    from one case into the next), as the working directory."""
    root = Path(tempfile.mkdtemp(prefix="opfuzz-"))
    try:
        (root / "schemas").mkdir()
        for name, data in case.files.items():
            (root / "schemas" / name).write_bytes(data)
        for rel, text in case.modules.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
        with contextlib.chdir(root):
            yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Result:
    check_rc: int
    output: str
    generated: dict[str, bytes] | None = None   # path under the root -> bytes, when accepted
    lib: object = None                          # the loaded OpLibrary, when accepted


def fuzz_one(case: Case, compile_cxx: bool = False) -> Result:
    """Run `case` through the CLI and every oracle (and the C++ syntax check when asked)."""
    __tracebackhide__ = True
    t0 = time.perf_counter()
    try:
        with case_root(case) as root:
            res = run_case(case, root)
            if res.generated is not None:
                check_generated(case, res)
                if compile_cxx:
                    check_cxx_compiles(root, res.generated)
        return res
    finally:
        STATS["cases"] += 1
        STATS["seconds"] += time.perf_counter() - t0


def run_case(case: Case, root: Path) -> Result:
    """check, then (when check accepts) list and generate, in `root` (the working directory);
    raises FuzzFailure for what the CLI itself must never do."""
    __tracebackhide__ = True
    rc, text = cli(["check", "schemas"])
    if rc not in (0, 1):
        raise failure("check_exit_status", f"`check` exited {rc}:\n{_clip(text)}")
    if rc != 0:
        return Result(rc, text)
    cli(["list", "schemas"])
    grc, gtext = cli(["generate", "schemas"])
    if grc != 0:
        raise failure("generate_fails_after_check",
                      f"`check` accepted, `generate` exited {grc}:\n{_clip(gtext)}")
    generated = {p.relative_to(root).as_posix(): p.read_bytes()
                 for p in sorted((root / "generated").rglob("*"))
                 if p.is_file() and "__pycache__" not in p.parts}
    from codegen.load import load_library

    STATS["accepted"] += 1
    return Result(rc, text, generated, load_library(["schemas"]))


# --- oracles on what generate wrote ----------------------------------------------------------

_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # where Python and GCC end a line (a lone CR too)


def check_generated(case: Case, res: Result) -> None:
    """Every oracle on an accepted case's output; raises the first FuzzFailure found."""
    __tracebackhide__ = True
    assert res.generated is not None
    check_file_name_lines(case, res.generated)
    check_control_characters(res.generated)
    check_python_compiles(res.generated)
    check_module_names(res.generated)
    check_int_literals(res.generated)
    check_torch_reach(res.generated)
    check_kernel_defaults(res.lib)
    check_registration(res)


def check_file_name_lines(case: Case, generated: dict[str, bytes]) -> None:
    """An op file's name may appear in generated files only on one line: a piece of it after a
    line break, starting a line, is code (a comment ended early)."""
    __tracebackhide__ = True
    tails = []
    for name in case.files:
        pieces = _LINE_BREAK.split(name)
        tails += [p.strip() for p in pieces[1:] if p.strip()]
    if not tails:
        return
    for rel, data in generated.items():
        for line in _LINE_BREAK.split(data.decode("utf-8", "replace")):
            for tail in tails:
                if line.lstrip().startswith(tail):
                    raise failure("file_name_starts_a_line",
                                  f"{rel}: a line starts with the file name's piece {tail!r}: "
                                  f"{_clip(line, 200)!r}")


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def check_control_characters(generated: dict[str, bytes]) -> None:
    """User text reaches generated files escaped: a raw CR ends a C++ or Python line (a comment
    then ends early), a NUL makes Python refuse the file; no other control character belongs in
    readable code either."""
    __tracebackhide__ = True
    for rel, data in generated.items():
        text = data.decode("utf-8", "replace")
        if m := _CONTROL.search(text):
            line = text.count("\n", 0, m.start()) + 1
            raise failure("raw_control_character",
                          f"{rel}:{line}: raw {m.group()!r} in generated text")


def check_python_compiles(generated: dict[str, bytes]) -> None:
    __tracebackhide__ = True
    for rel, data in generated.items():
        if rel.endswith((".py", ".pyi")):
            try:
                if rel.endswith(".py"):
                    compile(data, rel, "exec", dont_inherit=True)
                else:
                    ast.parse(data, rel)
            except (SyntaxError, ValueError) as e:
                raise failure("generated_python_does_not_compile", f"{rel}: {e}") from None


def _top_level_bindings(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in node.names]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names += [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]
    return names


def check_module_names(generated: dict[str, bytes]) -> None:
    """Generated modules own their module-level names: a user name bound beside them (a kernel
    imported as `functools`, an op `Tensor` in the stubs) replaces one the module relies on."""
    __tracebackhide__ = True
    for rel, data in generated.items():
        if not rel.endswith((".py", ".pyi")):
            continue
        tree = ast.parse(data, rel)
        bound = _top_level_bindings(tree)
        twice = sorted({n for n in bound if bound.count(n) > 1 and n != "__all__"})
        if twice:
            raise failure("module_name_bound_twice", f"{rel}: module-level {twice} bound twice")
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                and isinstance(n.ctx, ast.Load)}
        shadowed = sorted(set(bound) & used & set(dir(builtins)))
        if shadowed:
            raise failure("builtin_shadowed",
                          f"{rel}: module-level {shadowed} shadow the builtins the module uses")


_CXX_NOISE = re.compile(r'//[^\n\r]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_DIGITS = re.compile(r"\b\d{19,}\b")


def check_int_literals(generated: dict[str, bytes]) -> None:
    """No integer literal beyond int64 in code (a C++ literal that large is a warning and a wrapped
    value; in Python a size torch cannot hold)."""
    __tracebackhide__ = True
    for rel, data in generated.items():
        text = data.decode("utf-8", "replace")
        if rel.endswith((".cpp", ".h")):
            numbers = _DIGITS.findall(_CXX_NOISE.sub(" ", text))
        elif rel.endswith((".py", ".pyi")):
            numbers = [t.string for t in _tokens(text) if t.type == tokenize.NUMBER]
        else:
            continue
        for n in numbers:
            try:
                value = int(n.replace("_", ""), 0)
            except ValueError:
                continue
            if value > INT64_MAX:
                raise failure("int_literal_beyond_int64", f"{rel}: integer literal {_clip(n, 40)}")


def _tokens(text: str):
    try:
        return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return []


_baseline_dunders: set[str] | None = None


def _dunder_attrs(tree: ast.AST) -> set[str]:
    """Dunder attributes `tree` takes, but for op names taken of a namespace's op object
    (`_ops.__`, the positional twins' `_vmap_ops.__`, `torch.ops.ns.__`): check refuses the names
    every namespace has."""
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and n.attr.startswith("__") and n.attr.endswith("__")
            and not _names_an_op(n)}


def _names_an_op(node: ast.Attribute) -> bool:
    if isinstance(node.value, ast.Name):
        return node.value.id in ("_ops", "_vmap_ops")
    chain = _attr_chain(node.value)
    return chain is not None and len(chain) == 3 and chain[:2] == ["torch", "ops"]


def baseline_dunders() -> set[str]:
    """Dunder attributes the generators emit for the example library (not from user input)."""
    global _baseline_dunders
    if _baseline_dunders is None:
        found: set[str] = set()
        for p in (REPO / "generated" / "runtime").glob("*.py"):
            found |= _dunder_attrs(ast.parse(p.read_bytes()))
        _baseline_dunders = found
    return _baseline_dunders


def check_torch_reach(generated: dict[str, bytes]) -> None:
    """Formulas name torch functions, tensor methods and library ops: generated code must not
    walk from `torch` into another module (`torch.os.system`) or through dunder attributes."""
    __tracebackhide__ = True
    for rel, data in generated.items():
        if not rel.endswith(".py"):
            continue
        tree = ast.parse(data, rel)
        extra = _dunder_attrs(tree) - baseline_dunders()
        if extra:
            raise failure("dunder_attribute_reached", f"{rel}: generated code uses {sorted(extra)}")
        for node in ast.walk(tree):
            chain = _attr_chain(node)
            if chain and chain[0] in ("torch", "_torch") and chain[1:2] != ["ops"]:
                foreign = _foreign_module(tuple(chain[1:]))
                if foreign:
                    raise failure("torch_reaches_other_module",
                                  f"{rel}: torch.{'.'.join(chain[1:])} reaches module {foreign}")


@functools.lru_cache(maxsize=None)
def _foreign_module(chain: tuple[str, ...]) -> str | None:
    """The first module outside torch that `torch.<chain>` walks through, if any (torch.ops is
    left out: looking an op up there has side effects and reaches only ops)."""
    import torch

    obj: object = torch
    for attr in chain:
        obj = getattr(obj, attr, None)
        if obj is None:
            return None
        if isinstance(obj, types.ModuleType) and not obj.__name__.startswith("torch"):
            return obj.__name__
    return None


def _attr_chain(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not parts or not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _schema_default_value(default) -> tuple[bool, object]:
    from codegen import model as M

    if isinstance(default, M.NoneDefault):
        return True, None
    if isinstance(default, (M.BoolDefault, M.IntDefault, M.FloatDefault, M.StrDefault)):
        return True, default.value
    return False, None


def check_kernel_defaults(lib) -> None:
    """A Python kernel or fake function runs with its own default when the caller leaves the
    argument out of a Python call; it must equal the schema's."""
    __tracebackhide__ = True
    from codegen import config
    from codegen.dest.py_sources import find_module_source, python_roots
    from codegen.model import PyRef

    for op in lib.ops:
        refs = [k for _, k in op.dispatch if isinstance(k, PyRef)]
        if isinstance(op.fake, PyRef):
            refs.append(op.fake)
        for ref in refs:
            path = find_module_source(ref.module,
                                      python_roots(config.default_project(Path.cwd())))
            if path is None or "." in ref.name:
                continue
            try:
                tree = ast.parse(path.read_bytes())
            except (SyntaxError, ValueError):
                continue
            fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef)
                       and n.name == ref.name), None)
            if fn is None:
                continue
            params = fn.args.posonlyargs + fn.args.args
            given = dict(zip([p.arg for p in params[len(params) - len(fn.args.defaults):]],
                             fn.args.defaults))
            given.update({p.arg: d for p, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults)
                          if d is not None})
            for arg in op.schema.arguments:
                known, want = _schema_default_value(arg.default)
                if not known or arg.name not in given:
                    continue
                try:
                    have = ast.literal_eval(given[arg.name])
                except ValueError:
                    continue
                if isinstance(have, bool) != isinstance(want, bool) or have != want:
                    raise failure("kernel_default_differs",
                                  f"{ref} has {arg.name}={have!r}, the schema of {op.name} "
                                  f"{arg.name}={want!r}")


@functools.lru_cache(maxsize=None)
def _torch_namespaces() -> frozenset[str]:
    """The namespaces torch itself has ops in, from a fresh interpreter (this one may hold test
    libraries)."""
    code = ("import torch\n"
            "print(*sorted({n.split('::')[0] for n in torch._C._dispatch_get_all_op_names()}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return frozenset(out.stdout.split())


def check_registration(res: Result) -> None:
    """What `import runtime` does with the library, short of compiling it: each namespace is
    claimed the way the generated C++ claims it (TORCH_LIBRARY, or TORCH_LIBRARY_FRAGMENT), every
    schema is defined with torch, and then every op is reachable through the generated
    `runtime.ops` module as the OpOverload it names."""
    __tracebackhide__ = True
    import torch

    lib, generated = res.lib, res.generated
    fragment = {m.group(1) for rel, data in generated.items() if rel.endswith(".cpp")
                for m in re.finditer(rb"TORCH_LIBRARY_FRAGMENT\s*\(\s*(\w+)", data)}
    held, defined = [], []
    try:
        in_process = {n.split("::")[0] for n in torch._C._dispatch_get_all_op_names()}
        for ns in lib.namespaces:
            kind = "FRAGMENT" if ns.encode() in fragment else "DEF"
            if kind == "DEF" and ns in in_process and ns not in _torch_namespaces():
                continue  # claimed by another test of this process (the example's `exops`)
            try:
                held.append(torch.library.Library(ns, kind))
            except Exception as e:  # noqa: BLE001  (torch's refusal is the finding)
                raise failure("torch_refuses_namespace",
                              f"torch.library.Library({ns!r}, {kind!r}): {_clip(str(e), 300)}"
                              ) from None
            for op in lib.ops:
                if op.namespace != ns:
                    continue
                text = str(op.schema)
                if text.startswith(ns + "::"):
                    text = text[len(ns) + 2:]
                try:
                    # m.def itself, as the generated C++ calls it (Library.define's Python part
                    # looks the op up through torch.ops, which _check_ops_module tests).
                    held[-1].m.define(text, "", tuple(getattr(torch.Tag, t) for t in op.tags))
                except Exception as e:  # noqa: BLE001
                    raise failure("torch_refuses_schema",
                                  f"m.def({text!r}) in {ns}: {type(e).__name__}: "
                                  f"{_clip(str(e), 300)}") from None
                defined.append((ns, op.name.name))
        _check_ops_module(lib, res.generated)
    finally:
        for h in held:
            h._destroy()
        _forget_packets(defined)


def _forget_packets(defined: list[tuple[str, str]]) -> None:
    """Drop the torch.ops.<ns>.<op> packets cached for ops now deregistered, so the next case
    looks its ops up afresh."""
    import torch

    for ns, name in defined:
        namespace = torch.ops.__dict__.get(ns)
        if isinstance(namespace, torch._ops._OpNamespace):
            if isinstance(namespace.__dict__.get(name), torch._ops.OpOverloadPacket):
                del namespace.__dict__[name]
            if name in getattr(namespace, "_dir", []):
                namespace._dir.remove(name)


def _check_ops_module(lib, generated: dict[str, bytes]) -> None:
    __tracebackhide__ = True
    source = generated.get("generated/runtime/ops.py")
    if source is None:
        raise failure("no_ops_module", "generate wrote no generated/runtime/ops.py")
    mod = types.ModuleType("runtime.ops")
    mod.__file__ = "generated/runtime/ops.py"
    try:
        exec(compile(source, mod.__file__, "exec", dont_inherit=True), mod.__dict__)
    except Exception as e:  # noqa: BLE001
        raise failure("ops_module_import_fails",
                      f"{type(e).__name__}: {_clip(str(e), 300)}") from None
    names = list(getattr(mod, "__all__", []))
    preset = sorted(n for n in names if n in vars(mod))
    if preset:
        own = type(vars(mod)[preset[0]]).__name__
        raise failure("op_shadowed_in_ops_module",
                      f"runtime.ops.{preset[0]} is the module's own {own}, not the op "
                      f"(all: {preset})")
    reached = set()
    for n in names:
        try:
            value = getattr(mod, n)
        except Exception as e:  # noqa: BLE001
            raise failure("op_unreachable",
                          f"runtime.ops.{n}: {type(e).__name__}: {_clip(str(e), 200)}") from None
        if not isinstance(value, torch_op_overload()):
            raise failure("op_unreachable",
                          f"runtime.ops.{n} is {type(value).__name__} {value!r:.80}, "
                          "not an OpOverload")
        reached.add(value._schema.name + "." + (value._schema.overload_name or "default"))
    # Resolved ops may be cached in the module: they must not replace what it uses.
    try:
        dir(mod)
        missing = hasattr(mod, "no_such_op_opfuzz")
    except Exception as e:  # noqa: BLE001
        raise failure("ops_module_broken_by_op_names",
                      f"runtime.ops after resolving every op: {type(e).__name__}: "
                      f"{_clip(str(e), 200)}") from None
    if missing:
        raise failure("ops_module_broken_by_op_names", "runtime.ops has no_such_op_opfuzz")
    want = {f"{op.namespace}::{op.name.name}.{op.name.overload or 'default'}" for op in lib.ops}
    if want - reached:
        raise failure("op_unreachable",
                      f"not reachable through runtime.ops: {sorted(want - reached)}")


def torch_op_overload():
    import torch

    return torch._ops.OpOverload


# --- C++ syntax check --------------------------------------------------------------------------

_cxx: tuple[list[str], Path] | None = None


def cxx_flags() -> tuple[list[str], Path]:
    """(g++ flags as the build compiles registrations, the precompiled header to force-include).
    The header holds every torch include the templates use, so one 400 MB parse serves every case
    (from ~10 s to ~3 s a unit); it is cached under build/ by flags and compiler."""
    global _cxx
    if _cxx is not None:
        return _cxx
    import torch
    from torch.utils import cpp_extension

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    flags = ["-std=c++20", "-Wall", "-Wextra", "-Winvalid-pch", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
             f'-DOPGEN_TORCH_VERSION="{torch.__version__}"']
    flags += [f for inc in cpp_extension.include_paths("cpu") for f in ("-isystem", inc)]
    includes = sorted({line for t in (REPO / "codegen" / "templates").glob("*.j2")
                       for line in t.read_text().splitlines()
                       if re.fullmatch(r"#include <[\w/.]+>", line)})
    header_text = "\n".join(includes) + "\n"
    version = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256((header_text + " ".join(flags) + version).encode()).hexdigest()[:12]
    pch_dir = REPO / "build" / "fuzz-pch" / key
    header = pch_dir / "fuzz_pch.h"
    if not (pch_dir / "fuzz_pch.h.gch").is_file():
        for old in pch_dir.parent.glob("*"):  # one 400 MB header is enough
            shutil.rmtree(old, ignore_errors=True)
        pch_dir.mkdir(parents=True, exist_ok=True)
        header.write_text(header_text)
        tmp = pch_dir / f"fuzz_pch.h.gch.{os.getpid()}"
        subprocess.run(["g++", *flags, "-x", "c++-header", str(header), "-o", str(tmp)],
                       check=True, capture_output=True)
        os.replace(tmp, pch_dir / "fuzz_pch.h.gch")
    _cxx = flags, header
    return _cxx


def check_cxx_compiles(root: Path, generated: dict[str, bytes]) -> None:
    """`g++ -fsyntax-only` on each generated C++ unit: no error, no warning."""
    __tracebackhide__ = True
    flags, header = cxx_flags()
    for rel in sorted(generated):
        if not rel.endswith(".cpp"):
            continue
        proc = subprocess.run(["g++", *flags, "-include", str(header), "-I", "generated/cpp",
                               "-fsyntax-only", rel], cwd=root, capture_output=True, text=True)
        STATS["compiled"] += 1
        if proc.returncode != 0 or "warning:" in proc.stderr:
            first = next((ln for ln in proc.stderr.splitlines()
                          if "error:" in ln or "warning:" in ln), proc.stderr[:300])
            kind = "cxx_warning" if proc.returncode == 0 else "cxx_does_not_compile"
            raise failure(kind, f"{rel}: {_clip(first, 400)}\n  (g++ {shlex.join(flags[:3])} ...)")
