"""Orchestration: op library IR -> every generated file, rendered in memory, then written.

Generators are pure functions `(OpLibrary, Diagnostics) -> {relative path: text}`; they live in
`codegen/dest/` (one module per output) and are listed in GENERATORS. Only `codegen.files` writes.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import jinja2

from codegen import config, escape
from codegen.diagnostics import Diagnostics, Loc
from codegen.files import FileSet
from codegen.model import OpLibrary

Generator = Callable[[OpLibrary, Diagnostics], dict[str, str]]


def output_dir() -> str:
    """Every generated file lives under this directory, relative to the project root
    (`generated` in opgen's own example; `[tool.opgen] generated`, codegen.config)."""
    return config.current().generated


def python_dir() -> str:
    """Where the generated Python modules go (`generated/runtime` in the example)."""
    return config.current().python_out


def set_stamp() -> str:
    """Written last: the digest of every other generated file (Note [Set-atomic writes] in
    codegen/files.py). `cd generated && sha256sum -c SHA256SUMS` checks the set by hand."""
    return config.current().stamp

# The most bytes one path component may have (NAME_MAX on Linux and macOS file systems).
NAME_MAX = 255

TEMPLATES = Path(__file__).resolve().parent / "templates"


def py_literal(value: object) -> str:
    """A Python literal of a value of the manifest or a registration: strings through
    `escape.py_string`, the rest (numbers, bools, lists of them) by repr."""
    if isinstance(value, str):
        return escape.py_string(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(py_literal(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    assert isinstance(value, (bool, int, float)) or value is None, value
    return repr(value)


# The filters user text goes through in templates, one per place it lands (codegen.escape).
ESCAPES: dict[str, Callable] = {
    "cpp_comment": escape.cpp_comment,
    "cpp_string": escape.cpp_string,
    "py_comment": escape.py_comment,
    "py": py_literal,
    "docstring": escape.docstring,
}


def template_environment(**filters: Callable) -> jinja2.Environment:
    """The jinja2 environment every generator renders with: templates/*.j2, undefined names are
    errors, block tags leave no blank lines, nothing is HTML-escaped; the escaping filters of
    ESCAPES (codegen.escape) are available to every template."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(ESCAPES)
    env.filters.update(filters)
    return env


def generators() -> list[tuple[str, Generator]]:
    """(name, generator) pairs, in output order. Imported lazily: `check` needs none of them."""
    gens: list[tuple[str, Generator]] = []
    from codegen.dest import cpp_kernels, cpp_library, cpp_register, cpp_stable, py_ops

    gens += [
        ("cpp-kernels", cpp_kernels.generate),
        ("cpp-register", cpp_register.generate),
        ("cpp-stable", cpp_stable.generate),
        ("cpp-stamp", cpp_library.generate_stamps),
        ("py-ops", py_ops.generate_ops),
        ("py-manifest", py_ops.generate_manifest),
        ("py-loader", py_ops.generate_loader),
        ("py-init", py_ops.generate_init),
    ]
    from codegen.dest import py_reg, py_stubs

    gens += [
        # Generators take what they render with from here (Note [Generators take what they
        # render with] in codegen/dest/py_reg.py).
        ("py-reg", functools.partial(py_reg.generate_registrations, banner=banner,
                                     template_environment=template_environment)),
        ("py-stubs", py_stubs.generate_stubs),
    ]
    return gens


def render(lib: OpLibrary, diags: Diagnostics) -> FileSet:
    from codegen.dest import ninja

    out = FileSet()
    for _name, gen in generators():
        out.update(gen(lib, diags))
    # The build file comes last: its codegen edge declares exactly the files of this set, so
    # the two cannot drift apart (an output never written would rerun the edge on every build).
    out.update(ninja.generate(lib, diags, dict(out.files)))
    out.seal(set_stamp(), banner("#", [f.path for f in lib.files]))
    return out


def check_library(lib: OpLibrary, diags: Diagnostics) -> None:
    """Checks on the whole library that stand between `check` and a generate or an import that
    would fail: namespaces torch defines, names too long for a file, what the stable ABI cannot
    register at a namespace's min_torch."""
    from codegen.torch_namespaces import check_namespaces

    check_namespaces(lib, diags)
    check_file_names(lib, diags)
    from codegen.dest import cpp_stable

    cpp_stable.check(lib, diags)


@dataclass(frozen=True)
class DerivedName:
    """A name in the op files that becomes part of file names."""

    what: str           # `namespace`, `op file name` or `op name`
    value: str          # the name as the files use it
    loc: Loc            # where the op files give it
    placeholder: str    # how messages show it inside a file name


def derived_paths(lib: OpLibrary) -> list[tuple[str, DerivedName]]:
    """Every path that code generation or the build creates with a name made from the op files,
    with the name it is made from. Asks the generators, so it cannot drift from what they
    write."""
    from codegen.dest import cpp_library as L
    from codegen.dest import ninja
    from codegen.torch_namespaces import namespace_loc

    out: list[tuple[str, DerivedName]] = []
    for ns, shs in L.shards(lib).items():
        name = DerivedName("namespace", ns, namespace_loc(lib, ns), "<namespace>")
        module = L.python_module(ns).rpartition(".")[2]
        for path in (L.stamp_path(ns), f"{python_dir()}/{module}.py",
                     ninja.library_path(ns) + ninja.LINK_TEMP_SUFFIX,
                     ninja.gen_obj(ns, L.stamp_path(ns)) + ninja.DEPFILE_SUFFIX):
            out.append((path, name))
        for s in shs:
            name = DerivedName("op file name", s.name, Loc(s.file.path, 1, 1), "<file>")
            for path in (s.header, s.registration,
                         ninja.gen_obj(ns, s.registration) + ninja.DEPFILE_SUFFIX):
                out.append((path, name))
            for op_name, ops in L.ops_by_name(s).items():
                out.append((s.op_header(op_name),
                            DerivedName("op name", op_name, ops[0].loc, "<op>")))
    return out


def check_file_names(lib: OpLibrary, diags: Diagnostics) -> None:
    """A path component longer than NAME_MAX fails with ENAMETOOLONG in the middle of a generate
    or a build: refuse it here, located, once per name (for its longest file name)."""
    longest: dict[DerivedName, tuple[int, str]] = {}
    for path, name in derived_paths(lib):
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


def banner(comment: str, sources: list[str] | tuple[str, ...]) -> str:
    """The first line(s) of every generated file. `comment` is the line-comment token."""
    src = ", ".join(escape.banner_path(s) for s in sorted(set(sources))) or "the op library"
    return f"{comment} @generated by codegen from {src} - do not edit\n"

