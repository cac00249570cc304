"""Orchestration: op library IR -> every generated file, rendered in memory, then written.

Generators are pure functions `(OpLibrary, Diagnostics, Project) -> {relative path: text}`: the
project configuration (codegen.config.Project: where generated files go, the package's name) is
an argument, never a global, so two projects render side by side in one process. They live in
`codegen/dest/` (one module per output) and are listed in `generators()`. Only `codegen.files`
writes.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from codegen import compat, jobs
from codegen import layout as L
from codegen.dest import (cmake, cpp_aoti, cpp_autograd, cpp_kernel_index, cpp_kernels,
                          cpp_register, cpp_stable, cpp_stamp, ninja, py_ops, py_reg, py_stubs)
from codegen.rendering import banner, python_dir, set_stamp
from codegen.torch_namespaces import check_namespaces, namespace_loc
from codegen.diagnostics import Diagnostics, Loc
from codegen.config import Project
from codegen.files import FileSet
from codegen.load import LoadErrors
from codegen.model import OpLibrary

Generator = Callable[[OpLibrary, Diagnostics, Project], dict[str, str]]


# The most bytes one path component may have (NAME_MAX on Linux and macOS file systems).
NAME_MAX = 255


def generators() -> list[tuple[str, Generator]]:
    """(name, generator) pairs, in output order."""
    return [
        ("cpp-kernels", cpp_kernels.generate),
        ("cpp-register", cpp_register.generate),
        ("cpp-stable", cpp_stable.generate),
        ("cpp-stamp", cpp_stamp.generate_stamps),
        ("cpp-autograd", cpp_autograd.generate),
        ("cpp-aoti", cpp_aoti.generate),
        ("py-aoti", cpp_aoti.generate_helper),
        ("py-ops", py_ops.generate_ops),
        ("py-manifest", py_ops.generate_manifest),
        ("py-loader", py_ops.generate_loader),
        ("py-init", py_ops.generate_init),
        ("py-reg", py_reg.generate_registrations),
        ("py-stubs", py_stubs.generate_stubs),
        ("cmake", cmake.generate),    # only with `[tool.opgen] cmake = true`
    ]


# The generators from this one on read nothing that earlier ones or the whole-library checks
# report (cpp_autograd, before it, is the one that asks whether errors were found), so they may
# run in a process of their own (codegen.jobs) while this one runs the checks and the others: the
# C++ sources here, the Python modules there.
ASIDE_FROM = "cpp-aoti"
# The ops that pay for that process: the generators after ASIDE_FROM take about 0.1 s for them.
OPS_PER_PROCESS = 250


def render(lib: OpLibrary, diags: Diagnostics, project: Project) -> FileSet:
    """Every file of `project`'s generated set, in memory."""
    out = _render(lib, diags, project, None)
    assert out is not None
    return out


def check_and_render(lib: OpLibrary, diags: Diagnostics, project: Project) -> FileSet | None:
    """`check_library`, then, where it found no error, `render`; None where it did. The checks
    run while a child process renders the Python side (codegen.jobs)."""
    def checked() -> bool:
        check_library(lib, diags, project)
        return not diags.has_errors

    return _render(lib, diags, project, checked)


def add_later_errors(e: LoadErrors, project: Project) -> None:
    """Add to the load's errors what the later stages (check_and_render) find in the ops that
    loaded without one, so that one run reports a misspelled kernel function beside a bad
    dispatch key. Whatever they say inside an op entry the load found wrong (from its `func:` to
    the next op's) is left out: it would only follow from the first error."""
    lib = e.lib
    spans: dict[str, list[tuple[int, int]]] = {}    # op file -> line ranges of its op entries
    for f in lib.files:
        starts = list(f.entries) or sorted(op.loc.line for op in f.ops)
        spans[f.path] = [(a, b - 1) for a, b in zip(starts, starts[1:] + [1 << 30])]
    tainted: dict[str, set[int] | None] = {}        # None: the whole file
    for d in e.diags.items:
        if d.severity != "error" or d.loc.path not in spans:
            continue
        hit = [i for i, (a, b) in enumerate(spans[d.loc.path]) if a <= d.loc.line <= b]
        if not hit:
            tainted[d.loc.path] = None
        elif tainted.get(d.loc.path, set()) is not None:
            tainted.setdefault(d.loc.path, set()).update(hit)

    def follows(d) -> bool:
        if d.loc.path not in tainted:
            return False
        bad = tainted[d.loc.path]
        return bad is None or any(a <= d.loc.line <= b for i, (a, b) in
                                  enumerate(spans[d.loc.path]) if i in bad)

    later = Diagnostics()
    try:
        sound, left_out = e.sound()
        for f in sound.files:
            later.add_source(f.path, f.source)
        check_and_render(sound, later, project)
    except Exception:   # noqa: BLE001  (a library with errors: the load's errors say enough)
        return
    # An op left out for its schema is unknown to the others: not a finding of its own.
    mentions = re.compile("|".join(f"'{re.escape(n)}'" for n in sorted(left_out)) or "(?!)")
    new = [d for d in later.items if d.severity == "error" and not follows(d)
           and not mentions.search(d.message)]
    if new:
        e.diags.absorb(later, new)


def _render(lib: OpLibrary, diags: Diagnostics, project: Project,
            before: Callable[[], bool] | None) -> FileSet | None:
    gens = generators()
    cut = [name for name, _ in gens].index(ASIDE_FROM)
    parts = [gens[:cut], gens[cut:]] if jobs.count(len(lib.ops), OPS_PER_PROCESS) > 1 else [gens]

    def run(part: list[tuple[str, Generator]]) -> tuple[list[dict[str, str]], list]:
        start = len(diags.items)
        outputs = [gen(lib, diags, project) for _, gen in part]
        if part is parts[0]:
            # The kernel index describes the kernel headers, which this part renders
            # (codegen.dest.cpp_kernel_index).
            outputs.append(cpp_kernel_index.generate(
                lib, diags, project, {k: v for o in outputs for k, v in o.items()}))
        return outputs, diags.items[start:]

    results = jobs.split(run, parts, before=before)
    if results is None:
        return None
    out = FileSet()
    for i, (outputs, found) in enumerate(results):
        if i:   # what a child found; this process's own part reported to `diags` itself
            diags.items.extend(found)
        for files in outputs:
            out.update(files)
    # The build file comes last: its codegen edge declares exactly the files of this set, so
    # the two cannot drift apart (an output never written would rerun the edge on every build).
    out.update(ninja.generate(lib, diags, project, dict(out.files)))
    out.seal(set_stamp(project), banner("#", [f.path for f in lib.files]))
    return out


def check_library(lib: OpLibrary, diags: Diagnostics, project: Project) -> None:
    """Checks on the whole library that stand between `check` and a generate or an import that
    would fail: namespaces torch defines, names too long for a file, what the stable ABI cannot
    register at a namespace's min_torch; `removed:` entries naming an op the library defines."""
    check_namespaces(lib, diags)
    compat.check_removed(lib, diags)
    check_file_names(lib, diags, project)
    cpp_stable.check(lib, diags)
    cpp_autograd.check(lib, diags)
    check_package_loads(diags, project)


def check_package_loads(diags: Diagnostics, project: Project) -> None:
    """A warning when importing a project's package would not load its op libraries: its
    `__init__.py` (or a module of the package it imports, at any depth) must import the generated
    subpackage (docs/CONFIG.md). Without it `import <package>` succeeds, and every op is missing
    (`torch.ops.<ns>` has no attribute ...) until something imports the generated modules."""
    if project.config_path is None or not project.generated_in_package:
        return
    target = project.module_prefix
    line = f"from {target} import ops  # opgen: loads the op libraries"
    pkg_dir = Path(project.package_dir)
    init = pkg_dir / "__init__.py"
    if not init.is_file():
        diags.warning(Loc(project.package_dir, 1, 1), f"the package {project.package} has no "
                      f"__init__.py, so `import {project.package}` loads no op library",
                      f"create {init.as_posix()} holding `{line}`")
        return
    seen: set[Path] = set()
    todo = [(init, project.package)]
    while todo:
        path, package = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            return      # not ours to judge; check passes what it cannot read
        for name in _imported_names(tree, package):
            if name == target or name.startswith(target + "."):
                return
            if name.startswith(project.package + "."):
                rel = name[len(project.package) + 1:].split(".")
                for candidate, pkg in ((pkg_dir.joinpath(*rel[:-1], rel[-1] + ".py"),
                                        name.rpartition(".")[0]),
                                       (pkg_dir.joinpath(*rel, "__init__.py"), name)):
                    if candidate.is_file():
                        todo.append((candidate, pkg))
    text = init.read_text(encoding="utf-8")
    if text.partition("\n")[0].strip():
        diags.add_source(init.as_posix(), text)
    diags.warning(Loc(init.as_posix(), 1, 1), f"`import {project.package}` loads no op library: "
                  f"{init.as_posix()} imports nothing of {target}",
                  f"add `{line}` (docs/CONFIG.md)")


def _imported_names(tree: ast.AST, package: str) -> list[str]:
    """The absolute module names the imports of module `tree` (of `package`) name: for a
    `from X import y`, both X and X.y (y may be a submodule)."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                up = parts[:len(parts) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            names += [base] + [f"{base}.{a.name}" for a in node.names]
    return names


@dataclass(frozen=True)
class DerivedName:
    """A name in the op files that becomes part of file names."""

    what: str           # `namespace`, `op file name` or `op name`
    value: str          # the name as the files use it
    loc: Loc            # where the op files give it
    placeholder: str    # how messages show it inside a file name


def derived_paths(lib: OpLibrary, project: Project) -> list[tuple[str, DerivedName]]:
    """Every path that code generation or the build creates with a name made from the op files,
    with the name it is made from. Asks the generators, so it cannot drift from what they
    write."""
    out: list[tuple[str, DerivedName]] = []
    for ns, shs in L.shards(lib).items():
        name = DerivedName("namespace", ns, namespace_loc(lib, ns), "<namespace>")
        module = L.python_module(project, ns).rpartition(".")[2]
        stamp = L.stamp_path(project, ns)
        for path in (stamp, f"{python_dir(project)}/{module}.py",
                     ninja.library_path(project, ns) + ninja.LINK_TEMP_SUFFIX,
                     ninja.gen_obj(project, ns, stamp) + ninja.DEPFILE_SUFFIX):
            out.append((path, name))
        for s in shs:
            name = DerivedName("op file name", s.name, Loc(s.file.path, 1, 1), "<file>")
            registration = s.registration(project)
            for path in (s.header(project), registration,
                         ninja.gen_obj(project, ns, registration) + ninja.DEPFILE_SUFFIX):
                out.append((path, name))
            for op_name, ops in L.ops_by_name(s).items():
                out.append((s.op_header(project, op_name),
                            DerivedName("op name", op_name, ops[0].loc, "<op>")))
    return out


def check_file_names(lib: OpLibrary, diags: Diagnostics, project: Project) -> None:
    """A path component longer than NAME_MAX fails with ENAMETOOLONG in the middle of a generate
    or a build: refuse it here, located, once per name (for its longest file name)."""
    longest: dict[DerivedName, tuple[int, str]] = {}
    for path, name in derived_paths(lib, project):
        for part in Path(path).parts:
            size = len(os.fsencode(part))
            if size > NAME_MAX and name.value in part and size > longest.get(name, (0, ""))[0]:
                longest[name] = (size, part)
    for name, (size, part) in longest.items():
        over = size - NAME_MAX
        shown = part.replace(name.value, name.placeholder)
        diags.error(name.loc, f"{name.what} '{_short(name.value)}' is too long: it makes a file "
                    f"name {shown} of {size} bytes, and a file name may have at most {NAME_MAX}",
                    f"shorten it by at least {over} character{'s' if over != 1 else ''}")


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."

