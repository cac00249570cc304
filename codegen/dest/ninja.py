"""Op library IR + the kernel sources on disk -> `generated/build.ninja`: one shared library per op
namespace, `build/lib<ns>_ops.so`, from the hand-written kernels in the project's kernel
directories (`runtime/csrc/` in the example; `*.cpp`, `*.cc`, and `*.cu` for CUDA, searched
recursively) and the generated registration shards and stamp. Paths are those of the example;
a project's `[tool.opgen]` (codegen.config) moves each of them, and every path written here is
relative to the project root.

The file is the same on every machine: compilers, flags and include paths come from
`build/toolchain.ninja`, which `python -m codegen.build` writes from torch.utils.cpp_extension
(Note [Toolchain] in codegen/toolchain.py). It also rebuilds itself: a `codegen` edge reruns
`python -m codegen generate` when a schema, template, generator module or the set of kernel sources
changes; codegen writes only files whose text changed and the edge has `restat = 1`, so ninja
recompiles nothing whose inputs kept their bytes.

Op files and kernel sources may be added or removed: the codegen edge depends on a listing of
them that the build rescans (Note [Input listing]), so the next build regenerates this file
first, and a build after an edit that only renamed files over themselves regenerates nothing.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import sys
from collections.abc import Sequence, Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ninja import ninja_syntax

from codegen.abi import namespace_abi
from codegen.config import KERNEL_SUFFIXES, Project, is_below
from codegen import layout as L
from codegen.diagnostics import Diagnostics, Loc
from codegen.load import directory_op_files
from codegen.rendering import banner, set_stamp
from codegen.model import OpLibrary
from codegen.files import write_atomic, write_if_changed


def build_dir(project: Project) -> str:
    return project.build


def toolchain_file(project: Project) -> str:
    return project.toolchain


def ninja_file(project: Project) -> str:
    return project.ninja_file


def codegen_depfile(project: Project) -> str:
    return f"{build_dir(project)}/codegen.d"

# The linker writes here, then the file is renamed: a link killed midway, or one that fills the
# disk, never leaves a truncated library under the name `import runtime` loads.
LINK_TEMP_SUFFIX = ".tmp"
DEPFILE_SUFFIX = ".d"       # the compiler's depfile beside each object
# How the build file marks a stable-ABI namespace, for its readers (the build's notes read the
# ABI from index.json, codegen.build_notes).
STABLE_MARK = "abi: stable, torch >="


@dataclass(frozen=True)
class BuildInputs:
    """What the build file needs beyond the IR, all paths relative to the repository root."""

    # namespace -> its kernel sources (runtime/csrc/<ns>/**/*.{cpp,cc,cu}), each with the path
    # its object gets below build/obj/<ns>/
    kernel_sources: dict[str, tuple[tuple[str, str], ...]]
    codegen_args: tuple[str, ...]                # what `python -m codegen generate` is given
    # every other file code generation writes (gen.render's set): the codegen edge's outputs
    outputs: tuple[str, ...]


def obj(project: Project, ns: str, source: str, rel: str | None = None) -> str:
    """The object of kernel source `source`; `rel` is its path below its namespace's kernel
    directory (the file name when not given)."""
    name = rel if rel is not None else PurePosixPath(source).name
    stem = name[: -len(".cpp")] if name.endswith(".cpp") else name   # x.cu -> x.cu.o
    return f"{build_dir(project)}/obj/{ns}/{stem}.o"


def gen_obj(project: Project, ns: str, generated: str) -> str:
    """The object of a generated source. Kernel objects mirror the kernel directories below
    obj/<ns>/, where any path can occur (a kernel `gen/stamp.cpp`); `<ns>.gen` is no namespace's
    directory, since a namespace is an identifier."""
    return f"{build_dir(project)}/obj/{ns}.gen/{PurePosixPath(generated).stem}.o"


def headers_target(project: Project, ns: str) -> str:
    """The phony target every compile of namespace `ns` waits on: its generated headers."""
    return f"{build_dir(project)}/obj/{ns}/headers"


def library_path(project: Project, ns: str) -> str:
    return f"{project.libraries}/{L.library_file(ns)}"


def build_ninja(lib: OpLibrary, inputs: BuildInputs, project: Project) -> str:
    """The build file's text: a pure function of the library and `inputs`."""
    out = io.StringIO()
    w = ninja_syntax.Writer(out, width=100)
    sources = sorted({f.path for f in lib.files})
    out.write(banner("#", sources))
    w.comment(f"Build with `{project.build_command}`: it writes the machine's "
              f"toolchain to {toolchain_file(project)}, then runs `ninja -f {ninja_file(project)}` "
              "in the project root.")
    w.newline()
    w.variable("ninja_required_version", "1.10")
    w.variable("builddir", build_dir(project))
    w.include(ninja_syntax.escape_path(toolchain_file(project)))
    w.newline()

    w.comment("Reruns code generation; unchanged files keep their mtime (restat), so nothing "
              "downstream rebuilds.")
    w.comment("Its depfile names every generator module, template and grammar it read: the list "
              "depends on the working tree, so it is not written here.")
    # Paths in a command are the shell's words (a directory named with a space is one word);
    # `$` is ninja's escape there.
    args = " ".join(_shell(a) for a in (codegen_depfile(project), *inputs.codegen_args))
    w.rule("codegen", f"$codegen generate --depfile {args}",
           description="CODEGEN " + " ".join(inputs.codegen_args).replace("$", "$$"),
           generator=True, restat=True, depfile=codegen_depfile(project).replace("$", "$$"),
           deps="gcc")
    w.newline()
    w.rule("cxx", f"$cxx -MMD -MF $out{DEPFILE_SUFFIX} $cflags $extra_cflags -c $in -o $out",
           depfile=f"$out{DEPFILE_SUFFIX}", deps="gcc", description="CXX $in")
    w.newline()
    w.comment("The stamp includes no torch header: it compiles in milliseconds.")
    w.rule("stamp", "$cxx $stamp_cflags -c $in -o $out", description="STAMP $out")
    w.newline()
    w.comment("Links to a temporary, renamed once complete: a killed link leaves no truncated "
              "library.")
    w.rule("link", f"$cxx -shared -o $out{LINK_TEMP_SUFFIX} $in $ldflags && "
           f"mv -f $out{LINK_TEMP_SUFFIX} $out", description="LINK $out")
    w.newline()
    w.comment(f"Rule `cu` (CUDA kernels) comes from {toolchain_file(project)}: nvcc when torch has CUDA, "
              "otherwise a rule that skips the source and says so.")
    w.newline()

    all_shards = L.shards(lib)
    # The completion stamp is written last (Note [Set-atomic writes] in codegen/files.py): an
    # interrupted generate leaves it missing, so this edge reruns before anything compiles.
    generated = [ninja_file(project), set_stamp(project), *sorted(inputs.outputs)]
    # Not the directories: the set of files in them (Note [Input listing]).
    w.build(generated, "codegen", sources, implicit=[input_listing(project)])
    # An input with no rule that goes missing (a deleted op file, the listing before the first
    # build) stops ninja before it can regenerate; as a phony target it only makes this edge
    # rerun.
    w.comment("Phony: deleting one of these inputs reruns the edge above instead of stopping ninja.")
    for path in dict.fromkeys([*sources, input_listing(project)]):
        w.build(path, "phony")
    w.newline()

    libraries = []
    for ns, shs in all_shards.items():
        # Every compile of the namespace waits for its generated headers through one phony
        # edge: listing them on each edge would make the file quadratic in op files.
        headers = [headers_target(project, ns)]
        a = namespace_abi(lib, ns)
        # Note [ABI choice] in codegen/abi.py: a stable namespace sees only the stable headers
        # (build/stable-include), targets its min_torch, and links no libtorch C++ symbol.
        cflags = {} if a is None else {
            "cflags": f"$stable_cflags -DTORCH_TARGET_VERSION={a.target_version}"}
        cuda = {} if a is None else {
            "cuda_cflags": f"$stable_cuda_cflags -DTORCH_TARGET_VERSION={a.target_version}"}
        w.comment(f"namespace {ns}" + ("" if a is None else
                                       f" ({STABLE_MARK} {a.min_text})"))
        w.build(headers, "phony", [s.header(project) for s in shs])
        objects = []
        for src, rel in inputs.kernel_sources.get(ns, ()):
            o = obj(project, ns, src, rel)
            if src.endswith(".cu"):
                w.build(o, "cu", src, order_only=headers, variables=cuda or None)
            else:
                w.build(o, "cxx", src, order_only=headers,
                        variables={"extra_cflags": "$kernel_cflags", **cflags})
            objects.append(o)
        for s in shs:
            o = gen_obj(project, ns, s.registration(project))
            w.build(o, "cxx", s.registration(project), order_only=headers,
                    variables=cflags or None)
            objects.append(o)
        # The namespace's other generated sources (C++ autograd, AOTInductor shims): whatever
        # generation wrote under its directory, so a new generator needs no line here.
        stamp_src = L.stamp_path(project, ns)
        own = {s.registration(project) for s in shs} | {stamp_src}
        for src in sorted(p for p in inputs.outputs if p.endswith(".cpp") and p not in own
                          and PurePosixPath(p).parent == PurePosixPath(stamp_src).parent):
            o = gen_obj(project, ns, src)
            w.build(o, "cxx", src, order_only=headers)
            objects.append(o)
        stamp = gen_obj(project, ns, stamp_src)
        w.build(stamp, "stamp", stamp_src)
        objects.append(stamp)
        # A stable namespace with CUDA kernels adds the CUDA runtime ($stable_cuda_ldflags,
        # empty where torch has no CUDA and the kernels compile to empty objects).
        has_cu = any(src.endswith(".cu") for src, _ in inputs.kernel_sources.get(ns, ()))
        w.build(library_path(project, ns), "link", objects,
                variables=None if a is None else {
                    "ldflags": "$stable_ldflags" + (" $stable_cuda_ldflags" if has_cu else "")})
        libraries.append(library_path(project, ns))
        w.newline()
    w.default([ninja_syntax.escape_path(p) for p in libraries])
    return out.getvalue()


def scan_inputs(lib: OpLibrary, outputs: dict[str, str], project: Project,
                root: Path = Path("."), diags: Diagnostics | None = None) -> BuildInputs:
    """Read the disk: kernel sources of each namespace, and the code generator's own files.
    `outputs` ({path: text}) are the files code generation writes besides the build file and
    its stamp.

    Paths are relative to `root` (the project root, where the CLI and ninja run), so the
    committed build file is machine-independent. With `diags`, kernel sources that belong to no
    namespace and hand-written TORCH_LIBRARY blocks for a generated namespace are errors.
    """
    sources = kernel_sources(project, list(lib.namespaces), root, diags)
    if diags is not None:
        paths = [L.index_path(project, ns) for ns in L.shards(lib)]
        indexes = [json.loads(outputs[p]) for p in paths if p in outputs]
        check_kernel_sources(sources, set(L.shards(lib)), root, diags, indexes)
    return BuildInputs(sources, _codegen_args(lib, root), tuple(outputs))


def kernel_sources(project: Project, namespaces: list[str], root: Path = Path("."),
                   diags: Diagnostics | None = None) -> dict[str, tuple[tuple[str, str], ...]]:
    """namespace -> ((source, path below its namespace directory), ...). Every configured
    kernel directory is searched recursively; a source in
    `<dir>/<ns>/` belongs to namespace `<ns>`, any other to the library's only namespace.
    Hidden files and directories are skipped."""
    out: dict[str, list[tuple[str, str]]] = {}
    owner: dict[str, str] = {}
    for kdir, p, rel in _kernel_tree(project, root):
        if p.suffix not in KERNEL_SUFFIXES or not p.is_file():
            continue
        source = f"{kdir}/{rel.as_posix()}"
        if len(rel.parts) > 1 and rel.parts[0] in namespaces:
            ns, below = rel.parts[0], PurePosixPath(*rel.parts[1:]).as_posix()
        elif len(namespaces) == 1:
            ns, below = namespaces[0], rel.as_posix()
        elif not namespaces:
            # No op (an empty library, or op files whose errors are reported already):
            # nothing to compile it into, and nothing to tell the user about it.
            continue
        else:
            if diags is not None:
                loc, cpp_ns = _whole_file_loc(source, p, diags, namespace=True)
                move = (f"its code is in namespace '{cpp_ns}': move it to {kdir}/{cpp_ns}/"
                        if cpp_ns in namespaces else
                        f"move it to {kdir}/<namespace>/, one of: "
                        + ", ".join(sorted(namespaces)))
                diags.error(loc, "this kernel source belongs to no namespace: the op library "
                            "has several, and it is not in a directory named after one", move)
            continue
        o = obj(project, ns, source, below)
        if o in owner:
            if diags is not None:
                loc, _ = _whole_file_loc(source, p, diags)
                diags.error(loc, f"this kernel source and {owner[o]} would "
                            f"compile to the same object {o}", "rename one of them")
            continue
        owner[o] = source
        out.setdefault(ns, []).append((source, below))
    return {ns: tuple(v) for ns, v in out.items()}


def _kernel_tree(project: Project, root: Path):
    """(kernel directory, path, path below it) of every existing kernel directory and every
    entry below it, sorted, skipping hidden entries and generated sources."""
    for kdir in project.kernels:
        base = root / kdir
        if not base.is_dir():
            continue
        yield kdir, base, PurePosixPath()
        for p in sorted(base.rglob("*")):
            rel = p.relative_to(base)
            if any(part.startswith(".") for part in rel.parts):
                continue
            if is_below(f"{kdir}/{rel.as_posix()}", project.generated):
                continue    # generated sources, not kernels
            yield kdir, p, PurePosixPath(rel.as_posix())


# Note [Input listing]
# Code generation reads the op files of its directories and the set of kernel sources (the build
# file compiles each one), so adding or removing one must rerun the codegen edge. The edge does
# not depend on those directories themselves: a directory's mtime changes whenever any entry is
# created, renamed or removed, and editors do that all the time without changing the set (a
# save through a temporary renamed over the file, `sed -i`, a swap or backup file), which reran
# code generation, and printed its notes again, on the build after every such edit (the fix of
# a failed compile). The edge depends instead on `<build>/codegen-inputs`, this set as text:
# `opgen build` rescans it before ninja runs, and `generate --depfile` (the edge itself) writes
# it when the op-file directories it read are others; each writes it only when the set changed,
# so its mtime moves only then.


def input_listing(project: Project) -> str:
    return f"{build_dir(project)}/codegen-inputs"


def listing_text(project: Project, op_dirs: Sequence[str], root: Path = Path(".")) -> str:
    """The set of Note [Input listing]: the op-file directories (what a rescan reads again),
    the op files in them, and every kernel source candidate (whatever namespace it falls in)."""
    op_files = sorted(f"{d}/{p.name}" for d in op_dirs if (root / d).is_dir()
                      for p in (root / d).glob("*") if p.suffix in (".yaml", ".yml"))
    kernels = [f"{kdir}/{rel.as_posix()}" for kdir, p, rel in _kernel_tree(project, root)
               if p.suffix in KERNEL_SUFFIXES and p.is_file()]
    return json.dumps({"op_dirs": sorted(op_dirs), "op_files": op_files, "kernels": kernels},
                      indent=1) + "\n"


def refresh_listing(project: Project, root: Path = Path(".")) -> None:
    """Before ninja runs (`opgen build`): write the listing when the set changed, so that the
    codegen edge reruns exactly then. Without a listing yet, its op-file directories are those
    of the project's `schemas` (what `generate` reads by default): were the edge to write the
    first listing, it would change its own input while it runs, and run twice."""
    path = root / input_listing(project)
    try:
        op_dirs = json.loads(path.read_text(encoding="utf-8"))["op_dirs"]
    except (OSError, ValueError, KeyError, TypeError):
        op_dirs = sorted({p if (root / p).is_dir() else str(PurePosixPath(p).parent)
                          for p in (PurePosixPath(s).as_posix() for s in project.schemas)
                          if (root / p).exists()})
    write_if_changed(path, listing_text(project, op_dirs, root))


_CPP_NAMESPACE = re.compile(r"\bnamespace\s+([A-Za-z_]\w*)(?:\s*::\s*\w+)*\s*\{")
_CODE = re.compile(r"\S+")


def _whole_file_loc(source: str, path: Path, diags: Diagnostics,
                    namespace: bool = False) -> tuple[Loc, str | None]:
    """Where a diagnostic about a whole kernel source points, with the source's text added to
    `diags` so the line is shown: with `namespace`, its first `namespace <name> {` (and that
    name); else, or without one, its first line of code; line 1 in an empty file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return Loc(source, 1, 1), None
    diags.add_source(source, text)
    code = blank_comments_and_strings(text)
    m = _CPP_NAMESPACE.search(code) if namespace else None
    if m:
        return _loc(source, code, m.start(), m.end() - m.start()), m[1]
    first = _CODE.search(code)
    if first is None:
        return Loc(source, 1, 1), None
    end = code.find("\n", first.start())
    return _loc(source, code, first.start(),
                (len(code) if end < 0 else end) - first.start()), None


# A hand-written `TORCH_LIBRARY(ns, m)`; TORCH_LIBRARY_FRAGMENT and TORCH_LIBRARY_IMPL are fine.
_TORCH_LIBRARY = re.compile(r"\bTORCH_LIBRARY\s*\(\s*([A-Za-z_]\w*)")
_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)


def blank_comments_and_strings(text: str) -> str:
    """C++ source text with its comments and string literals blanked out, every offset kept."""
    return _COMMENT_OR_STRING.sub(_blank, text)


def _blank(m: re.Match) -> str:
    text = m[0]
    if "\n" not in text:      # most comments and every string literal: one line
        return " " * len(text)
    return re.sub(r"[^\n]", " ", text)


# A `TORCH_LIBRARY_IMPL(ns, key, m) {` block (or the stable ABI's), and the `m.impl(` calls in it.
_IMPL_BLOCK = re.compile(r"\b(?:STABLE_)?TORCH_LIBRARY_IMPL\s*\(\s*([A-Za-z_]\w*)\s*,\s*"
                         r"([A-Za-z_]\w*)\s*,\s*([A-Za-z_]\w*)\s*\)\s*\{")
_BRACE = re.compile(r"[{}]")
_NAME_ARGUMENT = re.compile(r'\s*(?:TORCH_SELECTIVE_(?:NAME|SCHEMA)\s*\(\s*)?"((?:\\.|[^"\\\n])*)"')


@dataclass(frozen=True)
class Registration:
    """One `m.impl("<name>", ...)` of a TORCH_LIBRARY_IMPL block whose op name is a literal."""

    namespace: str
    key: str                  # the block's dispatch key: CPU, CUDA, Meta, ...
    name: str                 # `op` or `op.overload`
    offset: int               # of the string literal in the source text
    length: int


Registered = AbstractSet[tuple[str, str, str]]     # (namespace, op name, dispatch key)


def impl_registrations(text: str, code: str | None = None) -> list[Registration]:
    """The kernels the TORCH_LIBRARY_IMPL blocks of C++ source `text` register by name (the
    generated registration units and hand-written kernel sources are read the same way). `code`:
    `text` through blank_comments_and_strings, when the caller has it."""
    if "TORCH_LIBRARY_IMPL" not in text:
        return []
    if code is None:
        code = blank_comments_and_strings(text)
    out = []
    for block in _IMPL_BLOCK.finditer(code):
        ns, key, var = block.groups()
        # Names computed at run time are left out: nothing to compare.
        for literal in _block_calls(text, code, block, var, "impl"):
            name = literal[1]
            if "::" in name:
                qualifier, _, name = name.partition("::")
                if qualifier != ns:
                    continue
            out.append(Registration(ns, key, name, literal.start(1) - 1,
                                    literal.end() - literal.start(1) + 1))
    return out


# A `TORCH_LIBRARY_FRAGMENT(ns, m) {` block (or the stable ABI's).
_FRAGMENT_BLOCK = re.compile(r"\b(?:STABLE_)?TORCH_LIBRARY_FRAGMENT\s*\(\s*([A-Za-z_]\w*)\s*,\s*"
                             r"([A-Za-z_]\w*)\s*\)\s*\{")
_DEF_OP_NAME = re.compile(r"\s*([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)\s*(?:\(|\Z)")


def _block_calls(text: str, code: str, block: re.Match, var: str, method: str):
    """The string literal (match on `text`) first passed to each `<var>.<method>(` call in the
    braces `block` opens; calls whose first argument is not a literal are left out."""
    depth, end = 1, len(code)
    for brace in _BRACE.finditer(code, block.end()):
        depth += 1 if brace[0] == "{" else -1
        if not depth:
            end = brace.end()
            break
    call = re.compile(rf"\b{re.escape(var)}\s*\.\s*{method}\s*\(")
    for c in call.finditer(code, block.end(), end):
        literal = _NAME_ARGUMENT.match(text, c.end())
        if literal is not None:
            yield literal


def fragment_definitions(text: str, code: str) -> list[Registration]:
    """The ops the TORCH_LIBRARY_FRAGMENT blocks of C++ source `text` (`code`: it through
    blank_comments_and_strings) define with a literal schema or name
    (`m.def("nms(Tensor dets, ...) -> Tensor")`), key "def"."""
    out = []
    for block in _FRAGMENT_BLOCK.finditer(code):
        ns, var = block.groups()
        for literal in _block_calls(text, code, block, var, "def"):
            schema = literal[1]
            if "::" in schema.partition("(")[0]:
                qualifier, _, schema = schema.partition("::")
                if qualifier.strip() != ns:
                    continue
            name = _DEF_OP_NAME.match(schema)
            if name is not None:
                out.append(Registration(ns, "def", name[1], literal.start(1) - 1,
                                        literal.end() - literal.start(1) + 1))
    return out


def _indexed_definitions(indexes: Sequence[dict]) -> Registered:
    """(namespace, op name, "def") of every op the generated registration units define, as the
    namespaces' index files record them (codegen.dest.cpp_kernel_index)."""
    return {(doc["namespace"], name, "def") for doc in indexes
            for names in doc.get("definitions", {}).values() for name in names}


def _indexed_registrations(indexes: Sequence[dict]) -> Registered:
    """(namespace, op name, key) of every kernel the generated registration units register, as
    the namespaces' index files record them (codegen.dest.cpp_kernel_index)."""
    # An index written before it recorded registrations has none: `opgen build` checks kernel
    # sources before ninja regenerates it.
    return {(doc["namespace"], name, key) for doc in indexes
            for pairs in doc.get("registrations", {}).values() for name, key in pairs}


def check_kernel_sources(sources: dict[str, tuple[tuple[str, str], ...]], generated: set[str],
                         root: Path, diags: Diagnostics, indexes: Sequence[dict] = ()) -> None:
    """Registrations in kernel sources that build fine and go wrong at import: an error here,
    located. What opgen registers comes from the namespaces' index files, `indexes`
    (codegen.dest.cpp_kernel_index): `registered` below.

    - A `TORCH_LIBRARY(<ns>, m)` block for a namespace whose TORCH_LIBRARY opgen generates aborts
      the process ("Only a single TORCH_LIBRARY can be used to register the namespace").
    - An `m.def("<op>(...) -> ...")` in a `TORCH_LIBRARY_FRAGMENT(<ns>, m)` block of an op the
      op files define (`registered` holds (namespace, op name, "def") for those) aborts the
      process too ("Tried to register an operator ... multiple times").
    - An `m.impl("<op>", ...)` in a `TORCH_LIBRARY_IMPL(<ns>, <key>, m)` block for a kernel that
      opgen registers too (`registered`: (namespace, op name, key), from the generated
      registration units) replaces opgen's, with only a warning ("Overriding a previously
      registered kernel"), and which one runs depends on the order the code loads in.
    """
    registered = _indexed_registrations(indexes) | _indexed_definitions(indexes)
    for ns_sources in sources.values():
        for source, _ in ns_sources:
            try:
                text = (root / source).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if "TORCH_LIBRARY" not in text:
                continue
            code = blank_comments_and_strings(text)
            for m in _TORCH_LIBRARY.finditer(code):
                ns = m[1]
                if ns not in generated:
                    continue
                diags.add_source(source, text)
                diags.error(_loc(source, code, m.start(), m.end() - m.start()),
                            f"TORCH_LIBRARY({ns}, ...) in a kernel source: opgen generates the "
                            f"TORCH_LIBRARY block of namespace '{ns}' from the op files, and a "
                            "second one aborts the process when the library is loaded",
                            "delete the block: declare its ops in the op files, and name their "
                            "kernels in each op's `dispatch:`")
            # (a TORCH_LIBRARY block's own m.def calls go with the error on the block)
            for r in fragment_definitions(text, code):
                if (r.namespace, r.name, r.key) not in registered:
                    continue
                diags.add_source(source, text)
                diags.error(_loc(source, code, r.offset, r.length),
                            f"{r.namespace}::{r.name} is defined here and in the op files: "
                            "opgen defines it from the op files, and a second definition "
                            "aborts the process when the library is loaded (\"Tried to "
                            "register an operator ... multiple times\")",
                            "delete this m.def (and the TORCH_LIBRARY_FRAGMENT block once it is "
                            "empty); the op file declares the op")
            for r in impl_registrations(text, code):
                if (r.namespace, r.name, r.key) not in registered:
                    continue
                what = ("`dispatch:` or its `fake:` rule" if r.key == "Meta" else "`dispatch:`")
                diags.add_source(source, text)
                diags.error(_loc(source, code, r.offset, r.length),
                            f"a second {r.key} kernel for {r.namespace}::{r.name}: the op's "
                            f"{what} in the op file gives it a {r.key} kernel, which opgen "
                            "registers, and this one "
                            "replaces it when the library loads (torch only warns: \"Overriding "
                            "a previously registered kernel\")",
                            f"delete this m.impl (and the TORCH_LIBRARY_IMPL({r.namespace}, "
                            f"{r.key}, m) block once it is empty); the op file's kernel is the "
                            "one registered")


def _loc(source: str, code: str, offset: int, length: int) -> Loc:
    line = code.count("\n", 0, offset) + 1
    col = offset - (code.rfind("\n", 0, offset) + 1) + 1
    return Loc(source, line, col, length)


def _codegen_args(lib: OpLibrary, root: Path) -> tuple[str, ...]:
    """The schema directories when the library is every op file in them (as `generate` reads a
    directory), else the files."""
    files = sorted({f.path for f in lib.files})
    dirs = sorted({str(PurePosixPath(f).parent) for f in files})
    in_dirs = {str(PurePosixPath(d) / PurePosixPath(p).name) for d in dirs
               for p in directory_op_files(str(root / d))}
    return tuple(dirs) if in_dirs == set(files) else tuple(files)


def depfile_text(lib: OpLibrary, project: Project, root: Path = Path(".")) -> str:
    """A make-style depfile for the codegen edge: every file that code generation read (the op
    files, the generator's own modules loaded in this process, its templates and grammars)."""
    package = Path(__file__).resolve().parent.parent
    inputs = {Path(f.path).resolve() for f in lib.files}
    for module in list(sys.modules.values()):
        f = getattr(module, "__file__", None)
        if f and Path(f).resolve().is_relative_to(package):
            inputs.add(Path(f).resolve())
    for pattern in ("templates/*.j2", "grammar/*.lark", "*.json", "loader.py"):
        inputs.update(p.resolve() for p in package.glob(pattern))
    if project.config_path is not None:
        inputs.add((project.root / project.config_path).resolve())
    deps = sorted(_rel(p, root) for p in inputs if p.is_file())
    return f"{_escape(ninja_file(project))}: " + " ".join(_escape(d) for d in deps) + "\n"


def _shell(word: str) -> str:
    """`word` as one shell word in a ninja rule's command."""
    return shlex.quote(word).replace("$", "$$")


def _escape(path: str) -> str:
    return path.replace("\\", "\\\\").replace(" ", "\\ ").replace("#", "\\#").replace("$", "$$")


def write_depfile(path: Path, lib: OpLibrary, project: Project) -> None:
    """The codegen edge's depfile, and its input listing (Note [Input listing])."""
    write_atomic(path, depfile_text(lib, project))
    op_dirs = sorted({str(PurePosixPath(f.path).parent) for f in lib.files})
    write_if_changed(Path(input_listing(project)), listing_text(project, op_dirs))


def _rel(p: Path, root: Path) -> str:
    try:
        return p.relative_to(root.resolve()).as_posix()
    except ValueError:
        return p.as_posix()


def generate(lib: OpLibrary, diags: Diagnostics, project: Project,
             outputs: dict[str, str]) -> dict[str, str]:
    """The build file, whose codegen edge declares the paths of `outputs` (every other file of
    the generated set, {path: text}, codegen.gen.render) and nothing else: ninja reruns an edge
    one of whose declared outputs is missing, so a declared file that generation never writes
    makes every build regenerate."""
    return {ninja_file(project): build_ninja(lib, scan_inputs(lib, outputs, project, diags=diags),
                                             project)}
