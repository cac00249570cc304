"""The build hook for wheels: an opgen project's `setup.py` is one line,

    from codegen.setuptools import setup; setup()

and `pip wheel .`, `python -m build` and `pip install -e .` then generate the code, build the op
libraries with ninja (`opgen build`), and package them: a platform wheel (`cp311-cp311-linux_x86_64`,
not `py3-none-any`) holding the package, its generated modules and its `lib<ns>_ops.so`, which
needs torch alone at run time. Keyword arguments go to setuptools.setup unchanged.

What it does on top of setuptools (all through setuptools' own extension points):
- generates first, so the generated subpackage exists when the packages are listed;
- `packages` (unless given): the project's package and its subpackages, generated one included;
- `package_data` (added to what is given): the built libraries, the `.pyi` stubs, `py.typed`;
- `build_py` compiles the libraries before copying the package (`pip install -e .` too: the
  libraries are built in place, inside the package, so the editable install finds them);
- the distribution reports binary content, so the wheel gets the platform tag.

The libraries must be built inside the package (`libraries`, by default the package directory)
to be packaged; docs/CONFIG.md has the keys. A build in an isolated environment would install
torch from PyPI into it (gigabytes): build with `pip wheel --no-build-isolation .` (the documented
way, docs/MIGRATION.md), with torch and opgen installed.
"""

from __future__ import annotations

import sys
from pathlib import Path, PurePosixPath

import setuptools
from setuptools.command.build_py import build_py as _build_py
from setuptools.dist import Distribution

from codegen import config
from codegen.diagnostics import Diagnostics, UserError


class BinaryDistribution(Distribution):
    """A distribution with compiled content: bdist_wheel gives it a platform tag."""

    def has_ext_modules(self) -> bool:
        return True


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


class build_py(_build_py):
    """setuptools' build_py, after `opgen build` has compiled the op libraries."""

    def run(self) -> None:
        project = _project()
        _run(["--project", str(project.root), "build"])
        self.__dict__.pop("data_files", None)   # list the package data again: the libraries
        super().run()


def setup(**kwargs) -> None:
    """setuptools.setup for an opgen project (see the module docstring)."""
    project = _project()
    _run(["--project", str(project.root), "generate"])
    pkg_dir = PurePosixPath(project.package_dir)
    parent = pkg_dir.parent
    if "packages" not in kwargs:
        found = setuptools.find_packages(where=str(project.root / parent),
                                         include=[project.package, f"{project.package}.*"])
        kwargs["packages"] = found
        if str(parent) != ".":
            kwargs.setdefault("package_dir", {"": str(parent)})
    data = {k: list(v) for k, v in kwargs.get("package_data", {}).items()}
    if _below(project.libraries, project.package_dir):
        owner = _package_of(project, project.libraries)
        data.setdefault(owner, []).append("lib*_ops.so")
    else:
        print(f"warning: [tool.opgen] libraries = {project.libraries} is outside the package "
              f"{project.package_dir}; the wheel will not hold the op libraries", file=sys.stderr)
    if project.generated_in_package:
        data.setdefault(project.module_prefix, []).append("*.pyi")
    data.setdefault(project.package, []).append("py.typed")
    kwargs["package_data"] = data
    cmdclass = dict(kwargs.get("cmdclass", {}))
    cmdclass.setdefault("build_py", build_py)
    kwargs["cmdclass"] = cmdclass
    kwargs.setdefault("distclass", BinaryDistribution)
    kwargs.setdefault("zip_safe", False)
    setuptools.setup(**kwargs)


def _below(path: str, directory: str) -> bool:
    return PurePosixPath(path).parts[:len(PurePosixPath(directory).parts)] == \
        PurePosixPath(directory).parts


def _package_of(project: config.Project, directory: str) -> str:
    rel = PurePosixPath(directory).relative_to(project.package_dir)
    return ".".join((project.package, *rel.parts))


__all__ = ["BinaryDistribution", "build_py", "setup"]
