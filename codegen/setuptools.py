"""The build hook for wheels: an opgen project's `setup.py` is one line,

    from codegen.setuptools import setup; setup()

and `pip wheel .`, `python -m build` and `pip install -e .` then generate the code, build the op
libraries with ninja (`opgen build`), and package them: a platform wheel (`cp311-cp311-linux_x86_64`,
or `py3-none-linux_x86_64` when every library is on the stable ABI; never `py3-none-any`) holding
the package, its generated modules and its `lib<ns>_ops.so`, which needs torch alone at run time. Keyword arguments go to setuptools.setup unchanged.

What it does on top of setuptools (all through setuptools' own extension points):
- generates first, so the generated subpackage exists when the packages are listed;
- `packages` (unless given): the project's package and its subpackages, generated one included;
- `package_data` (added to what is given): the built libraries, the `.pyi` stubs, `py.typed`
  (written into the wheel when the package has none: the stubs make it typed);
- `build_py` compiles the libraries before copying the package (`pip install -e .` too: the
  libraries are built in place, inside the package, so the editable install finds them);
- the distribution reports binary content, so the wheel gets the platform tag;
- the wheel says which torch it runs on (Note [Honest wheels]);
- the sdist holds the op files and kernel directories (a wheel is built from it), no library.

The libraries must be built, and the generated modules generated, inside the package
(`libraries` and `generated`, by default) to be packaged; either outside it is refused;
docs/CONFIG.md has the keys. A build in an isolated environment would install torch from PyPI
into it (gigabytes): build with `pip wheel --no-build-isolation .` (the documented way,
docs/MIGRATION.md), with torch and opgen installed.
"""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import NoReturn

import setuptools
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from setuptools.command.build_py import build_py as _build_py
from setuptools.command.sdist import sdist as _sdist
from setuptools.dist import Distribution

from codegen import config
from codegen.diagnostics import Diagnostics, Loc, UserError

try:    # setuptools >= 70.1 has its own; older ones use the `wheel` package's
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel as _bdist_wheel  # type: ignore[no-redef,import-not-found]
    except ImportError:
        # A Python 3.11 venv comes with setuptools 65 and no `wheel`: say so, not a traceback.
        raise SystemExit(
            f"error: opgen's setup() builds wheels with setuptools 70.1 or newer, or the `wheel` "
            f"package; this environment has setuptools {setuptools.__version__} "
            f"({Path(setuptools.__file__).parent}) and no `wheel`\n"
            f"hint: `pip install -U setuptools` in it, or require \"setuptools>=70.1\" in "
            f"[build-system] of pyproject.toml") from None


# Note [Honest wheels]
# What a wheel promises must be what its op libraries can keep:
# - a namespace on the full libtorch C++ API loads on the torch release it was compiled against
#   only (the C++ ABI changes between releases, and the loader checks the release): the wheel
#   requires `torch==<release>`, the public version without the local label. PEP 440 lets
#   `torch==2.13.0` match 2.13.0+cpu and 2.13.0+cu130 alike, which is right: builds of one release
#   share the C++ ABI, and PyPI's CUDA wheel carries no local label at all. What differs between
#   them is whether CUDA libraries exist; a library linked against them fails to load on a CPU
#   torch, and the loader says so (LibraryError) at import.
# - a namespace on the stable ABI loads on every torch from its min_torch on and uses no CPython
#   API: `torch>=<min_torch>`, and, when every namespace is stable, the tag `py3-none-<platform>`
#   (one wheel for every CPython; the platform tag stays).
# - a wheel with both says the stricter: `torch==<release>`, tagged for this CPython.
# The project's own requirement on torch (in [project] dependencies) is merged: kept when the
# wheel's requirement implies it, narrowed with a warning when it allows a torch the libraries
# cannot load on, and an error when no torch satisfies both.


@dataclass(frozen=True)
class TorchPromise:
    """What a wheel's op libraries need of torch."""

    specifier: str          # `==2.13.0` or `>=2.10`
    stable_only: bool       # every namespace is on the stable ABI: tag py3-none-<platform>
    why: str                # for messages


def torch_promise(abis: dict[str, tuple[int, int] | None], torch_version: str) -> TorchPromise | None:
    """The requirement for namespaces -> their stable min_torch (None: full ABI), built with
    `torch_version` (torch.__version__). None without any namespace."""
    if not abis:
        return None
    full = sorted(ns for ns, v in abis.items() if v is None)
    if full:
        release = Version(torch_version).public
        return TorchPromise(f"=={release}", False,
                            f"namespace{'s' if len(full) > 1 else ''} {', '.join(full)} "
                            f"{'are' if len(full) > 1 else 'is'} built on the full libtorch API "
                            f"of torch {release}")
    need = max(v for v in abis.values() if v is not None)
    text = f"{need[0]}.{need[1]}"
    return TorchPromise(f">={text}", True, f"the stable-ABI libraries need torch {text} or newer")


def merge_torch_requirement(requires: list[str], promise: TorchPromise
                            ) -> tuple[list[str], list[str]]:
    """(the requirements with torch's made honest, warnings). ValueError when the project's
    torch requirement and the promise exclude each other."""
    ours = SpecifierSet(promise.specifier)
    out: list[str] = []
    warnings: list[str] = []
    found = False
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            out.append(text)
            continue
        if canonicalize_name(req.name) != "torch":
            out.append(text)
            continue
        found = True
        merged = _merge(req.specifier, ours, promise, warnings)
        req.specifier = merged
        out.append(str(req))
    if not found:
        out.append(f"torch{promise.specifier}")
    return out, warnings


def _merge(theirs: SpecifierSet, ours: SpecifierSet, promise: TorchPromise,
           warnings: list[str]) -> SpecifierSet:
    if not str(theirs):
        return ours
    if promise.specifier.startswith("=="):
        pinned = Version(promise.specifier[2:])
        if not theirs.contains(pinned, prereleases=True):
            raise ValueError(f"the project requires torch{theirs}, but {promise.why}, which "
                             f"that excludes")
        return ours
    # Stable: keep the project's bounds, raise its lower bound to min_torch.
    minimum = Version(promise.specifier[2:])
    # Lower bounds below min_torch are raised: `>=`/`>` ones are replaced, a `~=` one keeps its
    # upper bound and gets min_torch beside it. A bound at or above it stays as written (`>2.10`
    # keeps excluding 2.10.0).
    below = [s for s in theirs if s.operator in (">=", ">", "~=")
             and Version(s.version) < minimum]
    kept = [s for s in theirs if s not in below or s.operator == "~="]
    implied = any(s.operator in (">=", ">", "==", "~=") and not s.version.endswith("*")
                  and Version(s.version) >= minimum for s in kept)
    merged = SpecifierSet(",".join([str(s) for s in kept]
                                   + ([] if implied else [promise.specifier])))
    if below:
        warnings.append(f"the project requires torch{theirs}, but {promise.why}: the wheel "
                        f"requires torch{merged}")
    # Some torch satisfies both if one of the bounds, or the release just above one (`>2.10`
    # takes 2.10.1 and 2.11), does.
    bounds = [Version(s.version.removesuffix(".*")) for s in merged if s.operator != "==="]
    probes = [minimum, *bounds, *(Version(f"{v.major}.{v.minor}.{v.micro + 1}") for v in bounds),
              *(Version(f"{v.major}.{v.minor + 1}") for v in bounds)]
    if not any(merged.contains(v, prereleases=True) for v in probes):
        raise ValueError(f"the project requires torch{theirs}, but {promise.why}: no torch "
                         "satisfies both")
    return merged


class BinaryDistribution(Distribution):
    """A distribution with compiled content: bdist_wheel gives it a platform tag. Its torch
    requirement is the one its op libraries can keep (Note [Honest wheels])."""

    torch_promise: TorchPromise | None = None

    def has_ext_modules(self) -> bool:
        return True

    def parse_config_files(self, *args, **kwargs) -> None:
        super().parse_config_files(*args, **kwargs)
        promise = type(self).torch_promise
        if promise is None:
            return
        try:
            requires, warnings = merge_torch_requirement(
                [str(r) for r in getattr(self, "install_requires", None) or []], promise)
        except ValueError as e:
            diags = Diagnostics()
            diags.error(_torch_requirement_loc(diags), str(e),
                        "loosen or remove the torch requirement in [project] dependencies")
            print(diags.render(), file=sys.stderr)
            raise SystemExit(1) from None
        if warnings:
            diags = Diagnostics()
            for w in warnings:
                diags.warning(_torch_requirement_loc(diags), w)
            print(diags.render(), file=sys.stderr)
        self.install_requires = requires
        self._finalize_requires()


_TORCH_STRING = re.compile(r"""(["'])\s*torch(?![\w.-])[^"']*\1""")


def _torch_requirement_loc(diags: Diagnostics) -> Loc:
    """Where pyproject.toml (of the working directory: the project root) requires torch."""
    try:
        text = Path(config.PYPROJECT).read_text(encoding="utf-8")
    except OSError:
        return Loc(config.PYPROJECT, 1, 1)
    diags.add_source(config.PYPROJECT, text)
    seen_dependencies = False
    for i, line in enumerate(text.splitlines(), 1):
        seen_dependencies = seen_dependencies or re.match(r"\s*dependencies\s*=", line) is not None
        m = _TORCH_STRING.search(line) if seen_dependencies else None
        if m:
            return Loc(config.PYPROJECT, i, m.start() + 1, m.end() - m.start())
    return Loc(config.PYPROJECT, 1, 1)


class bdist_wheel(_bdist_wheel):
    """bdist_wheel, tagged `py3-none-<platform>` when every op library is on the stable ABI."""

    def get_tag(self) -> tuple[str, str, str]:
        impl, abi, plat = super().get_tag()
        promise = getattr(self.distribution, "torch_promise", None)
        if promise is not None and promise.stable_only:
            return "py3", "none", plat
        return impl, abi, plat


def _project() -> config.Project:
    """The project being built: pip and `build` run setup.py in its root."""
    try:
        project = config.resolve(".", Diagnostics())
    except UserError as e:
        print(e.diags.render(), file=sys.stderr)
        raise SystemExit(1) from None
    if project.config_path is None:
        raise SystemExit(f"error: {Path.cwd() / config.PYPROJECT} has no [tool.opgen] table; "
                         "add one naming the package (docs/CONFIG.md)")
    return project


def _run(argv: list[str]) -> None:
    from codegen.__main__ import main

    code = main(argv)
    if code != 0:
        raise SystemExit(f"error: `opgen {' '.join(argv[2:])}` failed (exit status {code})")


def _outside_the_package(project: config.Project, key: str, what: str, hint: str) -> NoReturn:
    """Exit with the located error for `key` of [tool.opgen] naming a directory outside the
    package: the wheel would not hold `what`."""
    diags = Diagnostics()
    diags.error(config.locate_value(project, key, diags), f"'{key}' is outside the package "
                f"{project.package_dir}, so a wheel would not hold {what}", hint)
    print(diags.render(), file=sys.stderr)
    raise SystemExit(1)


class build_py(_build_py):
    """setuptools' build_py, after `opgen build` has compiled the op libraries."""

    def run(self) -> None:
        project = _project()
        editable = getattr(self, "editable_mode", False)
        if not project.generated_in_package and not editable:
            # An editable install runs the package in place, where it finds them (as opgen's
            # own example appends them to its path); a wheel would not hold them.
            _outside_the_package(project, "generated", "the generated modules (ops.py, the "
                                 "loader)", "generate inside the package, e.g. generated = "
                                 f"\"{project.package_dir}/_generated\" (the default)")
        _run(["--project", str(project.root), "build"])
        self.__dict__.pop("data_files", None)   # list the package data again: the libraries
        staged = Path(self.build_lib, *project.package.split("."))
        if not editable:
            # setuptools copies into build/lib and never removes what an earlier build left
            # there: a module or library since deleted, a generated directory since moved,
            # would go into this wheel too.
            shutil.rmtree(staged, ignore_errors=True)
        super().run()
        if not editable:
            # The wheel holds .pyi stubs, so it says it is typed (PEP 561).
            marker = staged / "py.typed"
            if not marker.exists():
                marker.write_text("", encoding="utf-8")


def sdist_sources(project: config.Project) -> list[str]:
    """What a wheel built from the sdist needs beyond the package (project-relative): the op
    files (a directory's `*.yaml`, as `opgen` reads them, the known failures file included) and
    every file of the kernel directories (sources and the headers they include), outside the
    generated and build directories."""
    root = project.root
    out: list[str] = []
    for entry in project.schemas:
        path = root / entry
        files = path.glob("*.yaml") if path.is_dir() else [path]
        out.extend(p.relative_to(root).as_posix() for p in files if p.is_file())
    for kdir in project.kernels:
        for p in sorted((root / kdir).rglob("*")):
            rel = p.relative_to(root).as_posix()
            if p.is_file() and not any(part.startswith(".") for part in
                                       p.relative_to(root / kdir).parts) \
                    and not config.is_below(rel, project.generated) \
                    and not config.is_below(rel, project.build):
                out.append(rel)
    return sorted(set(out))


class sdist(_sdist):
    """setuptools' sdist, holding what `opgen generate` and `opgen build` read (the op files
    and kernel sources: a wheel built from the sdist, as `python -m build` does, needs them)
    and no built op library."""

    def make_distribution(self) -> None:
        project = _project()
        # package_data names the built libraries; an sdist holds sources only.
        self.filelist.files = [f for f in self.filelist.files if not (
            Path(f).parent.as_posix() == project.libraries
            and re.fullmatch(r"lib\w+_ops\.so", Path(f).name))]
        self.filelist.extend(sdist_sources(project))
        self.filelist.sort()
        self.filelist.remove_duplicates()
        super().make_distribution()


def setup(**kwargs) -> None:
    """setuptools.setup for an opgen project (see the module docstring)."""
    project = _project()
    # What a wheel could not hold is refused before anything is generated or built.
    if not config.is_below(project.libraries, project.package_dir):
        _outside_the_package(project, "libraries", "the op libraries", "build them inside the "
                             f"package, e.g. libraries = \"{project.package_dir}\" (the default)")
    _run(["--project", str(project.root), "generate"])
    if "packages" not in kwargs:
        # The package and its subpackages, found below the package's own directory: a dotted
        # package (`acme.ops`) may sit in a namespace directory (`src/acme/`, no __init__.py)
        # that find_packages does not enter.
        subpackages = setuptools.find_packages(where=str(project.root / project.package_dir))
        packages = [project.package, *(f"{project.package}.{sub}" for sub in subpackages)]
        # The generated subpackage, and the directories on the way to it (`gen/_generated`:
        # find_packages does not enter a `gen/` without __init__.py).
        prefix = project.package
        for part in project.module_prefix.split(".")[len(project.package.split(".")):]:
            prefix = f"{prefix}.{part}"
            if prefix not in packages:
                packages.append(prefix)
        kwargs["packages"] = packages
        base = config.import_root(project.package, project.package_dir)
        if PurePosixPath(base, *project.package.split(".")).as_posix() != project.package_dir:
            kwargs.setdefault("package_dir", {project.package: project.package_dir})
        elif base != ".":
            kwargs.setdefault("package_dir", {"": base})
    data = {k: list(v) for k, v in kwargs.get("package_data", {}).items()}
    from codegen.layout import library_file

    abis = _abis(project, (*(kwargs.get("packages") or ()), *(kwargs.get("py_modules") or ())))
    # The libraries of the namespaces declared now: a namespace since moved or deleted leaves
    # its lib<ns>_ops.so behind in the package directory, which the wheel must not ship.
    # Named from the package's own directory: `libraries` may be a plain directory inside it
    # (`myops/lib`, no __init__.py), which setuptools lists as no package of its own.
    below = PurePosixPath(project.libraries).relative_to(project.package_dir)
    data.setdefault(project.package, []).extend(
        (below / library_file(ns)).as_posix() for ns in sorted(abis))
    if project.generated_in_package:
        data.setdefault(project.module_prefix, []).append("*.pyi")
    data.setdefault(project.package, []).append("py.typed")
    kwargs["package_data"] = data
    cmdclass = dict(kwargs.get("cmdclass", {}))
    cmdclass.setdefault("build_py", build_py)
    cmdclass.setdefault("bdist_wheel", bdist_wheel)
    cmdclass.setdefault("sdist", sdist)
    kwargs["cmdclass"] = cmdclass
    if "distclass" not in kwargs:
        kwargs["distclass"] = type("BinaryDistribution", (BinaryDistribution,),
                                   {"torch_promise": _promise(abis)})
    kwargs.setdefault("zip_safe", False)
    setuptools.setup(**kwargs)


def _abis(project: config.Project, shipped: tuple[str, ...] = ()
          ) -> dict[str, tuple[int, int] | None]:
    """Each namespace of the op files: the min_torch of its stable ABI, or None (the full API).
    Exits with located errors when a Python function the op files name lies where the wheel
    would not hold it (_modules_outside_the_package)."""
    from codegen.__main__ import _load
    from codegen.abi import namespace_abi

    with config.use(project):
        try:
            lib = _load([], project)     # from the cache `generate` has just filled
            diags = Diagnostics()
            diags.absorb(lib.diagnostics(), [])     # the op files' text, for source lines
            _modules_outside_the_package(project, lib, diags, shipped)
            diags.raise_if_errors()
        except UserError as e:
            print(e.diags.render(), file=sys.stderr)
            raise SystemExit(1) from None
        abis = {}
        for ns in lib.namespaces:
            a = namespace_abi(lib, ns)
            abis[ns] = None if a is None else a.min_torch
    return abis


def _py_refs(value: object, out: list) -> None:
    """Every PyRef (`module:function`) in an op's model, whatever field holds it."""
    import dataclasses

    from codegen.model import PyRef

    if isinstance(value, PyRef):
        out.append(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _py_refs(getattr(value, f.name), out)
    elif isinstance(value, (tuple, list, frozenset, set)):
        for v in value:
            _py_refs(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _py_refs(v, out)


def _modules_outside_the_package(project: config.Project, lib, diags: Diagnostics,
                                 shipped: tuple[str, ...] = ()) -> None:
    """The generated registrations import every module the op files name when the package is
    imported: one found only in the project (a 'python-roots' directory outside the package)
    is missing from the installed wheel, and `import <package>` fails there. `shipped`: the
    packages and modules the wheel holds besides (setup()'s `packages` and `py_modules`);
    `diags` shows the op files' source lines."""
    import os

    from codegen.dest.py_sources import find_module_source

    root = project.root.resolve()
    own = [root / r for r in project.python_roots] + [root]
    elsewhere = []
    for entry in sys.path:
        p = Path(entry or ".").resolve()
        if p != root and root not in p.parents:
            elsewhere.append(p)
    seen: set[str] = set()
    for op in lib.ops:
        refs: list = []
        _py_refs(op, refs)
        for ref in refs:
            module = ref.module
            if module in seen or any(module == p or module.startswith(p + ".")
                                     for p in (project.package, *shipped)):
                continue
            seen.add(module)
            found = find_module_source(module, own)
            if found is None or find_module_source(module, elsewhere) is not None:
                continue    # not the project's (check reports what is found nowhere)
            diags.error(ref.loc, f"module '{module}' of {ref} is outside the package "
                        f"{project.package} ({os.path.relpath(found, root)}), so the wheel would "
                        f"not hold it and `import {project.package}` would fail once installed",
                        f"move it into the package, e.g. as {project.package}."
                        f"{module.rpartition('.')[2]}, or have setup() ship it too "
                        "(`packages=`, `py_modules=`)")


def _promise(abis: dict[str, tuple[int, int] | None]) -> TorchPromise | None:
    """The wheel's torch requirement, from the op files' ABI choices and this torch."""
    import torch

    try:
        return torch_promise(abis, torch.__version__)
    except InvalidVersion:
        raise SystemExit(f"error: torch's version {torch.__version__!r} is not a PEP 440 "
                         "version; cannot say which torch the wheel needs") from None


__all__ = ["BinaryDistribution", "TorchPromise", "bdist_wheel", "build_py",
           "merge_torch_requirement", "sdist", "sdist_sources", "setup", "torch_promise"]
