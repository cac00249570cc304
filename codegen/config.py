"""Project configuration: `[tool.opgen]` in a project's `pyproject.toml` -> `Project`.

    [tool.opgen]
    package = "myops"                 # the Python package that holds the ops (required)
    schemas = ["ops"]                 # op files or directories
    kernels = ["csrc"]                # kernel source directories (.cpp, .cc, .cu, recursively)

Every path is relative to the project root (the directory of the pyproject.toml) and must stay
inside it, so generated files name project-relative paths only. The keys and their defaults are
documented in docs/CONFIG.md; KEYS below is the list. Errors are located diagnostics
(`pyproject.toml:LINE:COL: error: ...`): tomllib gives values without positions, so a key's
position is found again in the text (`_Locator`).

Commands find their project through `--project DIR` or the nearest pyproject.toml with a
`[tool.opgen]` table upward from the working directory. Without one, the layout of opgen's own
example (`DEFAULT`: package `runtime`, `schemas/`, `runtime/csrc/`, `generated/`, `build/`) at the
working directory is used, so an op file directory alone still works.

Code generation takes the project as an argument (codegen.gen.render); the command layers
activate one with `use()` (which also enters its root) and read it with `current()`.
"""

from __future__ import annotations

import contextlib
import contextvars
import keyword
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from codegen.diagnostics import Diagnostics, Loc, did_you_mean

PYPROJECT = "pyproject.toml"
KERNEL_SUFFIXES = (".cpp", ".cc", ".cu")


@dataclass(frozen=True)
class Project:
    """A project's layout; every path is project-relative, in POSIX form."""

    root: Path                              # absolute; never written into a generated file
    package: str                            # import name, e.g. `myops` or `acme.ops`
    package_dir: str                        # the package's directory, e.g. `src/myops`
    schemas: tuple[str, ...] = ("schemas",)
    # Kernel source directories, searched recursively. A source in `<dir>/<ns>/...` belongs to
    # namespace `<ns>`; any other source to the library's only namespace (codegen.dest.ninja).
    kernels: tuple[str, ...] = ()
    python_roots: tuple[str, ...] = (".",)  # where `module:function` references are looked up
    generated: str = "generated"            # generated sources, build.ninja, SHA256SUMS
    build: str = "build"                    # objects, the toolchain, depfiles
    libraries: str = "build"                # the linked lib<ns>_ops.so
    build_command: str = "opgen build"      # what error messages tell the user to run
    codegen_command: str = "opgen generate"
    cmake: bool = False                     # also generate <generated>/opgen.cmake
    snapshot: str = "opgen.lock"            # the op contracts `opgen bc-check` holds to
    docs: str = "docs/ops"                  # the op reference `opgen docs` writes (<ns>.md)
    config_path: str | None = None          # the pyproject.toml it came from (project-relative)
    # CUDA architectures for nvcc ("8.0;9.0+PTX"), below TORCH_CUDA_ARCH_LIST and above torch's
    # own (Note [CUDA architectures] in codegen/toolchain.py).
    cuda_arch: str | None = None

    # ---- derived

    @property
    def python_out(self) -> str:
        """Where the generated Python modules go: the generated directory itself when it lies
        inside the package (it is then the subpackage `<package>.<...>`), else
        `<generated>/<last name of the package>`, which the package appends to its `__path__`
        (opgen's own example: `generated/runtime`)."""
        if self.generated_in_package:
            return self.generated
        return f"{self.generated}/{self.package.rpartition('.')[2]}"

    @property
    def generated_in_package(self) -> bool:
        return is_below(self.generated, self.package_dir)

    @property
    def module_prefix(self) -> str:
        """The package the generated modules are in: `<prefix>.ops`, `<prefix>._reg_<ns>`."""
        if not self.generated_in_package:
            return self.package
        rel = PurePosixPath(self.generated).relative_to(self.package_dir)
        return ".".join((self.package, *rel.parts))

    @property
    def stamp(self) -> str:
        return f"{self.generated}/SHA256SUMS"

    @property
    def ninja_file(self) -> str:
        return f"{self.generated}/build.ninja"

    @property
    def toolchain(self) -> str:
        return f"{self.build}/toolchain.ninja"

    def relative(self, path: Path | str) -> str:
        """`path` (absolute, or relative to the working directory) relative to the root when it
        lies below it, else absolute. Below it as written counts too: a symlink in the project
        (a shared `schemas` linked in) names a file of the project."""
        for p in (Path(os.path.abspath(path)), Path(path).resolve()):
            try:
                return p.relative_to(self.root).as_posix() or "."
            except ValueError:
                pass
        return p.as_posix()


def is_below(path: str, directory: str) -> bool:
    if directory in ("", "."):
        return True
    return PurePosixPath(path).parts[:len(PurePosixPath(directory).parts)] == \
        PurePosixPath(directory).parts


def import_root(package: str, package_dir: str) -> str:
    """The directory `import <package>` finds the package from: for `acme.ops` in
    `src/acme/ops`, `src` (not `src/acme`, the parent of the package's own directory). A
    package-dir not named after the package has its parent."""
    parts = PurePosixPath(package_dir).parts
    names = tuple(package.split("."))
    if parts[-len(names):] == names:
        return PurePosixPath(*parts[:-len(names)]).as_posix()     # "." for no parts
    return str(PurePosixPath(package_dir).parent)


def default_project(root: Path) -> Project:
    """The layout of opgen's own example library (used where no [tool.opgen] is found)."""
    return Project(root=root.resolve(), package="runtime", package_dir="runtime",
                   schemas=("schemas",), kernels=("runtime/csrc",), python_roots=(".",),
                   generated="generated", build="build", libraries="build",
                   build_command="make build", codegen_command="make codegen",
                   snapshot="schemas/opgen.lock", docs="docs/ops")


_current: contextvars.ContextVar[Project | None] = contextvars.ContextVar("opgen_project",
                                                                         default=None)


def current() -> Project:
    """The active project; the example layout at the working directory when none is active."""
    p = _current.get()
    return p if p is not None else default_project(Path.cwd())


def active() -> Project | None:
    """The project `use` made active, or None (where `current` gives the example layout)."""
    return _current.get()


@contextlib.contextmanager
def use(project: Project):
    """Make `project` the active one, with its root as the working directory (op file paths,
    kernel sources and messages are all project-relative)."""
    token = _current.set(project)
    prev = Path.cwd()
    os.chdir(project.root)
    try:
        yield project
    finally:
        os.chdir(prev)
        _current.reset(token)


# --------------------------------------------------------------------------------------------------
# Finding and reading pyproject.toml


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.opgen] table, from `start` upward."""
    for d in [start.resolve(), *start.resolve().parents]:
        p = d / PYPROJECT
        if p.is_file() and _declares_opgen(p):
            return p
    return None


def _declares_opgen(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    try:
        tool = tomllib.loads(text).get("tool")
    except tomllib.TOMLDecodeError:
        # Still the project's: loading it reports the TOML error, located.
        return re.search(r"^\s*\[\s*tool\s*\.\s*opgen(?![\w-])|^\s*opgen\s*\.\s*package\s*=",
                         text, re.M) is not None
    # Also `opgen.package = ...` under [tool], or `tool.opgen = {...}`: TOML's other spellings.
    return isinstance(tool, dict) and "opgen" in tool


def resolve(project_dir: str | None, diags: Diagnostics) -> Project:
    """The project for a command: `--project DIR` (its pyproject.toml must have [tool.opgen],
    or else DIR gets the example layout), or the nearest one upward from the working
    directory, or the example layout at the working directory."""
    if project_dir is not None:
        d = Path(project_dir)
        if not d.is_dir():
            diags.error(Loc(project_dir, 1, 1), "no such project directory",
                        "--project names the directory holding pyproject.toml")
            diags.raise_if_errors()
        p = d / PYPROJECT
        if p.is_file() and _declares_opgen(p):
            return load(p, diags)
        return default_project(d)
    found = find_config(Path.cwd())
    if found is None:
        return default_project(Path.cwd())
    return load(found, diags)


def no_project(project: Project, project_dir: str | None) -> str | None:
    """The error (with its hint) for a command run where there is no project to work on: no
    [tool.opgen] found, and none of the example layout's op files or generated set either (a
    command run from the wrong directory, or `--project` naming the wrong one). None otherwise."""
    if project.config_path is not None or any(
            (project.root / p).exists() for p in (*project.schemas, project.generated)):
        return None
    if project_dir is None:
        why = f"no {PYPROJECT} with a [tool.opgen] table there or in a directory above"
    elif (project.root / PYPROJECT).is_file():
        why = f"its {PYPROJECT} has no [tool.opgen] table"
    else:
        why = f"it has no {PYPROJECT}"
    return (f"error: no opgen project in {project.root}: {why}, and no "
            f"{project.schemas[0]}/ directory of op files\n"
            "hint: run the command inside your project or name it with --project DIR; a project "
            "declares itself with [tool.opgen] in its pyproject.toml (docs/CONFIG.md)")


@dataclass
class _Locator:
    """Positions of keys and values of [tool.opgen] in the text of pyproject.toml."""

    path: str
    lines: list[str]
    table_line: int = 1                   # 1-based line of `[tool.opgen]`
    spans: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # key -> line, col, len

    @classmethod
    def of(cls, path: str, text: str) -> _Locator:
        loc = cls(path, text.splitlines())
        table = None
        header = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]")
        for i, line in enumerate(loc.lines, 1):
            m = header.match(line)
            if m and not line.lstrip().startswith("[["):
                table = re.sub(r"\s+", "", m[1]).replace('"', "")
                if table == "tool.opgen":
                    loc.table_line = i
                elif table.startswith("tool.opgen."):
                    # `[tool.opgen.KEY]` gives KEY a table: locate KEY at its header.
                    sub = table[len("tool.opgen."):].split(".")[0]
                    col = line.find(sub, line.find("opgen") + 5)
                    if col >= 0:
                        loc.spans.setdefault(sub, (i, col + 1, len(sub)))
                continue
            if table == "tool":
                # `opgen.KEY = ...` under [tool]: the same keys, dotted.
                k = re.match(r'^\s*opgen\s*\.\s*("?)([A-Za-z0-9_-]+)\1\s*=', line)
                if k:
                    if not loc.spans:
                        loc.table_line = i
                    loc.spans.setdefault(k[2], (i, k.start(2) + 1 - len(k[1]),
                                                len(k[2]) + 2 * len(k[1])))
                continue
            if table is None or not (table == "tool.opgen" or table.startswith("tool.opgen.")):
                continue
            k = re.match(r'^\s*("?)([A-Za-z0-9_.-]+)\1\s*=', line)
            if k:
                key = k[2] if table == "tool.opgen" else f"{table[len('tool.opgen.'):]}.{k[2]}"
                loc.spans.setdefault(key, (i, k.start(2) + 1 - len(k[1]), len(k[2]) + 2 * len(k[1])))
        return loc

    def key(self, key: str) -> Loc:
        line, col, length = self.spans.get(key, (self.table_line, 1, 1))
        return Loc(self.path, line, col, length)

    def value(self, key: str, item: str | None = None) -> Loc:
        """The value of `key`, or the string `item` inside it (a list element)."""
        line, col, _ = self.spans.get(key, (self.table_line, 1, 1))
        text = self.lines[line - 1] if line <= len(self.lines) else ""
        eq = text.find("=", col - 1)
        if eq < 0:
            return Loc(self.path, line, col)
        if item is not None:
            # Look for the quoted item from the `=` on, over the lines a multi-line list spans.
            for j in range(line, min(line + 200, len(self.lines)) + 1):
                s = self.lines[j - 1]
                start = eq + 1 if j == line else 0
                for quote in ('"', "'"):
                    at = s.find(quote + item + quote, start)
                    if at >= 0:
                        return Loc(self.path, j, at + 1, len(item) + 2)
                if j > line and "=" in s and not s.lstrip().startswith(('"', "'")):
                    break
        start = eq + 1
        while start < len(text) and text[start] in " \t":
            start += 1
        return Loc(self.path, line, start + 1, max(1, len(text.rstrip()) - start))


# key -> what it holds (for the unknown-key hint and docs/CONFIG.md)
KEYS = {
    "package": "the Python package that holds the ops (required)",
    "package-dir": "the package's directory (default: src/<package> or <package>)",
    "schemas": "op files or directories (default: schemas)",
    "kernels": "kernel source directories, searched recursively (default: csrc)",
    "python-roots": "where Python kernel modules are found (default: the directory the package is "
                    "imported from)",
    "generated": "generated sources (default: <package-dir>/_generated)",
    "build": "objects and the toolchain (default: build)",
    "libraries": "where the built libraries go (default: <package-dir>)",
    "build-command": "the build command error messages name (default: opgen build)",
    "codegen-command": "the code generation command error messages name (default: opgen generate)",
    "cmake": "also generate <generated>/opgen.cmake for a CMake build (default: false)",
    "snapshot": "the op contracts `opgen bc-check` compares with (default: opgen.lock)",
    "docs": "where `opgen docs` writes the op reference, <namespace>.md (default: docs/ops)",
    "cuda-arch": "CUDA architectures for nvcc, e.g. \"8.0;9.0+PTX\" (default: "
                 "TORCH_CUDA_ARCH_LIST, else those torch was built for)",
}


def load(path: Path, diags: Diagnostics) -> Project:
    """Read [tool.opgen] from `path`; every problem is a located error (UserError)."""
    root = path.parent.resolve()
    shown = _shown_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        diags.error(Loc(shown, 1, 1), f"cannot read {PYPROJECT}: {e}")
        diags.raise_if_errors()
        raise AssertionError("unreachable")
    diags.add_source(shown, text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        line, col = (int(m[1]), int(m[2])) if m else (1, 1)
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(e)) or "invalid TOML"
        diags.error(Loc(shown, line, col), f"{PYPROJECT} is not valid TOML: {message}")
        diags.raise_if_errors()
    table = data.get("tool", {}).get("opgen")
    at = _Locator.of(shown, text)
    if not isinstance(table, dict):
        diags.error(Loc(shown, at.table_line, 1), "[tool.opgen] must be a table")
        diags.raise_if_errors()
    reader = _Reader(root, at, diags)
    project = reader.read(table)
    diags.raise_if_errors()
    assert project is not None
    return replace(project, config_path=PurePosixPath(path.name).as_posix())


def locate_value(project: Project, key: str, diags: Diagnostics, item: str | None = None) -> Loc:
    """Where `key`'s value (or the string `item` in its list) is in the project's pyproject.toml
    (its text added to `diags`), for errors found after loading (an invalid `cuda-arch`, known
    only to torch)."""
    assert project.config_path is not None
    path = project.root / project.config_path
    shown = _shown_path(path)
    text = path.read_text(encoding="utf-8")
    diags.add_source(shown, text)
    return _Locator.of(shown, text).value(key, item)


# The names torch.utils.cpp_extension._get_cuda_arch_flags expands in TORCH_CUDA_ARCH_LIST
# (each stands for some versions: Hopper is 9.0+PTX).
CUDA_ARCH_NAMES = ("Kepler+Tesla", "Kepler", "Maxwell+Tegra", "Maxwell", "Pascal", "Volta+Tegra",
                   "Volta", "Turing", "Ampere+Tegra", "Ampere", "Ada", "Hopper",
                   "Blackwell+Tegra", "Blackwell")
# A version: major.minor, an arch-specific (a) or family (f) suffix, +PTX for PTX as well.
_ARCH_VERSION = re.compile(r"\d+\.\d+[af]?(?:\+PTX)?")
_SM = re.compile(r"(?:sm|compute)_(\d+)(\d)([af]?)")


def cuda_arch_entries(text: str) -> list[tuple[str, int]]:
    """The entries of a TORCH_CUDA_ARCH_LIST-style string, separated by `;` or spaces as torch
    reads them, each with its offset in `text`."""
    return [(m[0], m.start()) for m in re.finditer(r"[^; ]+", text)]


def cuda_arch_problem(entry: str, alone: bool) -> str | None:
    """What is wrong with `entry` of a TORCH_CUDA_ARCH_LIST ("" when it is no form torch takes),
    None if its form is one torch takes (`native` only as the whole list: the GPUs of the
    machine that builds)."""
    if _ARCH_VERSION.fullmatch(entry) or entry in CUDA_ARCH_NAMES or (entry == "native" and alone):
        return None
    if entry == "native":
        return "'native' (the GPUs of the building machine) stands alone, not in a list"
    if entry.lower().endswith("+ptx") and entry[:-4] in CUDA_ARCH_NAMES:
        return "a name already says which of its versions get PTX"
    return ""


def cuda_arch_hint(entry: str) -> str:
    sm = _SM.fullmatch(entry)
    if sm:
        return (f"did you mean '{sm[1]}.{sm[2]}{sm[3]}'? architectures are written as versions "
                "here, not as nvcc's sm_XY")
    near = did_you_mean(entry, CUDA_ARCH_NAMES)
    names = ", ".join(n for n in CUDA_ARCH_NAMES if "+" not in n)
    return ((near + " " if near else "") + "write versions such as 8.0, 8.6, 9.0a or 9.0+PTX, "
            f"or names torch knows ({names}, or a +Tegra variant), separated by ';' or spaces; "
            "or `native` alone")


def _shown_path(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass
class _Reader:
    root: Path
    at: _Locator
    diags: Diagnostics

    def error(self, loc: Loc, message: str, hint: str | None = None) -> None:
        self.diags.error(loc, message, hint)

    def cuda_arch(self, items: list[str], is_list: bool) -> str | None:
        """The architectures of `cuda-arch` (its strings `items`) as torch's
        TORCH_CUDA_ARCH_LIST takes them, `;`-separated; None after an error at each entry
        torch refuses. Which versions a torch supports is torch's to say (at build time, Note
        [CUDA architectures] in codegen/toolchain.py); the form is checked here, so that a CPU
        build, which never asks torch, does not take a misspelling."""
        entries = []
        bad = False
        for item in items:
            for entry, offset in cuda_arch_entries(item):
                entries.append(entry)
                problem = cuda_arch_problem(entry, len(items) == 1 and item.strip() == entry)
                if problem is None:
                    continue
                bad = True
                loc = self.at.value("cuda-arch", item if is_list else None)
                # The entry's place in the quoted string, when the file spells it as is.
                line = self.at.lines[loc.line - 1] if loc.line <= len(self.at.lines) else ""
                at = line.find(item, loc.col - 1)
                if at >= 0:
                    loc = Loc(loc.path, loc.line, at + offset + 1, len(entry))
                self.error(loc, f"'{entry}' is not a CUDA architecture"
                           + (f": {problem}" if problem else ""), cuda_arch_hint(entry))
        return None if bad else ";".join(entries)

    def read(self, table: dict) -> Project | None:
        for key in table:
            if key not in KEYS:
                self.error(self.at.key(key), f"unknown key '{key}' in [tool.opgen]",
                           did_you_mean(key, KEYS) or "known keys: " + ", ".join(KEYS))
        package = table.get("package")
        if package is None:
            self.error(Loc(self.at.path, self.at.table_line, 1),
                       "[tool.opgen] needs 'package', the Python package that holds the ops",
                       'add `package = "<your package>"`')
        elif not isinstance(package, str) or not package or not all(
                _IDENT.match(p) and not keyword.iskeyword(p) for p in package.split(".")):
            self.error(self.at.value("package"), f"'package' must be a Python package name "
                       f"(dotted identifiers), not {_repr(package)}")
            package = None
        # Without a package the other keys are still read, so that one run reports every
        # mistake of the table; the defaults made from the package are then left unchecked.
        pkg_path = package.replace(".", "/") if package is not None else "_"
        default_dir = f"src/{pkg_path}" if (self.root / "src" / pkg_path).is_dir() else pkg_path
        package_dir = self.path("package-dir", table.get("package-dir", default_dir),
                                must="dir", explicit="package-dir" in table)
        package_dir = package_dir or default_dir
        if package is not None and "package-dir" not in table and \
                not (self.root / default_dir).is_dir():
            self.missing_package(package, pkg_path)
        parent = import_root(package or pkg_path, package_dir)
        schemas = self.paths("schemas", table.get("schemas", ["schemas"]), must="exists",
                             explicit="schemas" in table)
        if schemas == [] and table.get("schemas") == []:
            self.error(self.at.value("schemas"), "'schemas' is empty: the project has no op files",
                       'name the op files or their directories, e.g. schemas = ["schemas"]')
        kernels = self.kernels(table)
        roots = self.paths("python-roots", table.get("python-roots", [parent]), must="dir",
                           explicit="python-roots" in table)
        generated = self.path("generated", table.get("generated", f"{package_dir}/_generated"))
        build = self.path("build", table.get("build", "build"))
        libraries = self.path("libraries", table.get("libraries", package_dir))
        for key, value in (("generated", generated), ("build", build), ("libraries", libraries)):
            # Directories opgen creates: the path, or the part of it that exists, must not be a
            # file (writing failed with "cannot create or open ...: File exists").
            if key not in table or value is None:
                continue
            existing = self.root / value
            while not existing.exists() and existing != self.root:
                existing = existing.parent
            if not existing.is_dir():
                self.error(self.at.value(key), f"'{key}': "
                           f"{existing.relative_to(self.root).as_posix()} is a file, not a "
                           "directory")
        if generated is not None and self.diags is not None and \
                is_below(generated, package_dir) and generated != package_dir:
            rel = PurePosixPath(generated).relative_to(package_dir)
            if not all(_IDENT.match(p) and not keyword.iskeyword(p) for p in rel.parts):
                self.error(self.at.value("generated"), f"'generated' lies inside the package, so "
                           f"it is a subpackage, but '{rel}' is not a Python module name",
                           "name it like a module, e.g. '_generated'")
        if generated == package_dir:
            self.error(self.at.value("generated"), "'generated' cannot be the package directory "
                       "itself (code generation removes every file there that it did not write)",
                       f"use a subdirectory, e.g. '{package_dir}/_generated'")
        elif generated is not None:
            self.generated_overlap(table, generated, {
                PYPROJECT: PYPROJECT, "package-dir": package_dir, "schemas": schemas,
                "kernels": kernels, "python-roots": roots, "build": build,
                "libraries": libraries})
        commands = {}
        for key in ("build-command", "codegen-command"):
            value = table.get(key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                self.error(self.at.value(key), f"'{key}' must be a non-empty string")
            elif value is not None:
                commands[key.replace("-command", "_command")] = value
        cmake = table.get("cmake", False)
        if not isinstance(cmake, bool):
            self.error(self.at.value("cmake"), f"'cmake' must be true or false, not {_repr(cmake)}")
        extra = {}
        for key, want in (("snapshot", "file"), ("docs", "directory")):
            if key in table:
                value = self.path(key, table[key])
                target = self.root / value if value is not None else None
                if target is not None and target.exists() and target.is_dir() != (
                        want == "directory"):
                    self.error(self.at.value(key), f"'{key}': {value} is a "
                               f"{'directory' if target.is_dir() else 'file'}, not a {want}",
                               "the op contracts are one JSON file" if key == "snapshot" else
                               "`opgen docs` writes one Markdown file per namespace there")
                elif value is not None:
                    extra[key] = value
        cuda_arch = table.get("cuda-arch")
        raw = cuda_arch if isinstance(cuda_arch, list) else [cuda_arch]
        items = [a for a in raw if isinstance(a, str)]
        if cuda_arch is not None and (len(items) < len(raw)
                                      or not cuda_arch_entries(";".join(items))):
            self.error(self.at.value("cuda-arch"), "'cuda-arch' must be a non-empty string of "
                       f"CUDA architectures or a list of them, not {_repr(cuda_arch)}",
                       'e.g. cuda-arch = "8.0;9.0+PTX"')
        elif cuda_arch is not None:
            arch = self.cuda_arch(items, isinstance(cuda_arch, list))
            if arch is not None:
                commands["cuda_arch"] = arch
        if self.diags.has_errors:
            return None
        assert package and generated and build and libraries and schemas is not None \
            and roots is not None
        return Project(root=self.root, package=package, package_dir=package_dir,
                       schemas=tuple(schemas), kernels=tuple(kernels or ()),
                       python_roots=tuple(roots), generated=generated, build=build,
                       libraries=libraries, cmake=cmake, **commands, **extra)

    def generated_overlap(self, table: dict, generated: str, owned: dict[str, object]) -> None:
        """Code generation removes every file under `generated` that it did not write, so it
        must hold none of the project's own files."""
        owned = {**owned, **{k: table[k] for k in ("snapshot", "docs")
                             if isinstance(table.get(k), str)}}
        for key, value in owned.items():
            for own in [value] if isinstance(value, str) else list(value or ()):  # type: ignore
                if is_below(PurePosixPath(own.replace("\\", "/")).as_posix(), generated):
                    what = ("the project itself" if key == PYPROJECT
                            else f"{own}, a '{key}' path")
                    if "generated" in table or key == PYPROJECT:
                        at = self.at.value("generated")
                        hint = ("give the generated sources a directory of their own, e.g. "
                                f"'{owned['package-dir']}/_generated'")
                    else:   # `generated` left to its default: the other key is the one written
                        at = self.at.value(key, own if isinstance(table.get(key), list) else None)
                        hint = (f"move '{key}' out of {generated} (where 'generated' is by "
                                "default), or give the generated sources another directory with "
                                "'generated'")
                    self.error(at, f"'generated' would hold {what}, and "
                               "code generation removes every file there that it did not write",
                               hint)
                    return

    def missing_package(self, package: str, pkg_path: str) -> None:
        """No directory holds the package: a misspelling would otherwise grow a new tree."""
        found = [p.parent.relative_to(base).as_posix().replace("/", ".")
                 for base in (self.root, self.root / "src") if base.is_dir()
                 for p in sorted(base.glob("*/__init__.py"))]
        self.error(self.at.value("package"), f"no directory {pkg_path} or src/{pkg_path} holds "
                   f"the package '{package}'", did_you_mean(package, found)
                   or "create the package, or say where it is with 'package-dir'")

    def path(self, key: str, value: object, *, must: str | None = None, explicit: bool = True,
             item: bool = False) -> str | None:
        loc = self.at.value(key, value if item and isinstance(value, str) else None)
        if not isinstance(value, str) or not value.strip():
            self.error(loc, f"{'each entry of ' if item else ''}'{key}' must be a path (a "
                       f"non-empty string), not {_repr(value)}")
            return None
        p = PurePosixPath(value.replace("\\", "/"))
        if p.is_absolute() or ".." in p.parts:
            self.error(loc, f"'{key}': {value} is not inside the project",
                       "paths in [tool.opgen] are relative to the directory of pyproject.toml "
                       "and stay below it")
            return None
        rel = p.as_posix()
        if must and explicit:
            target = self.root / rel
            ok = target.is_dir() if must == "dir" else target.exists()
            if not ok:
                self.error(loc, f"'{key}': {rel} does not exist"
                           + (" or is not a directory" if must == "dir" and target.exists()
                              else ""))
                return None
        return rel

    def paths(self, key: str, value: object, *, must: str | None = None,
              explicit: bool = True) -> list[str] | None:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            self.error(self.at.value(key), f"'{key}' must be a list of paths, not {_repr(value)}")
            return None
        out = []
        for v in value:
            p = self.path(key, v, must=must, explicit=explicit, item=True)
            if p is not None:
                out.append(p)
        return out

    def kernels(self, table: dict) -> list[str] | None:
        value = table.get("kernels")
        if value is None:
            return ["csrc"] if (self.root / "csrc").is_dir() else []
        dirs = self.paths("kernels", value, must="dir")
        if dirs is None or not isinstance(value, list) or len(dirs) != len(value):
            return dirs
        # Each directory is searched recursively: one named twice, or one inside another, would
        # compile its sources twice into the library.
        for i, (d, raw) in enumerate(zip(dirs, value)):
            outer = next((o for j, o in enumerate(dirs) if j != i and is_below(d, o)
                          and (o != d or j < i)), None)
            if outer is not None:
                self.error(self.at.value("kernels", raw),
                           f"'kernels' names {d} twice" if outer == d else
                           f"'kernels': {d} is inside {outer}, which is searched recursively "
                           "already", f"remove '{raw}'")
        return dirs


def _repr(value: object) -> str:
    if isinstance(value, (dict,)):
        return "a table"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"'{value}'"
    return f"{type(value).__name__} {value!r}"
