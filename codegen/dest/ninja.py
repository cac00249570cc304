"""Op library IR + the kernel sources on disk -> `generated/build.ninja`: one shared library per op
namespace, `build/lib<ns>_ops.so`, from the hand-written kernels in the project's kernel
directories (`runtime/csrc/` in the example; `*.cpp`, `*.cc`, and `*.cu` for CUDA, searched
recursively) and the generated registration shards and stamp. Paths are those of the example;
a project's `[tool.opgen]` (codegen.config) moves each of them, and every path written here is
relative to the project root.

The file is the same on every machine: compilers, flags and include paths come from
`build/toolchain.ninja`, which `python -m codegen.build` writes from torch.utils.cpp_extension
(Note [Toolchain] in codegen/build.py). It also rebuilds itself: a `codegen` edge reruns
`python -m codegen generate` when a schema, template, generator module or the set of kernel sources
changes; codegen writes only files whose text changed and the edge has `restat = 1`, so ninja
recompiles nothing whose inputs kept their bytes.

Kernel sources may be added or removed: each kernel directory is an input of the codegen edge (a
directory's mtime changes when its entries do), so the next build regenerates this file first.
"""

from __future__ import annotations

import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ninja import ninja_syntax

from codegen import config
from codegen.abi import namespace_abi
from codegen.config import KERNEL_SUFFIXES
from codegen.dest import cpp_library as L
from codegen.diagnostics import Diagnostics, Loc
from codegen.gen import banner, set_stamp
from codegen.model import OpLibrary


def build_dir() -> str:
    return config.current().build


def toolchain_file() -> str:
    return config.current().toolchain


def ninja_file() -> str:
    return config.current().ninja_file


def codegen_depfile() -> str:
    return f"{build_dir()}/codegen.d"

# The linker writes here, then the file is renamed: a link killed midway, or one that fills the
# disk, never leaves a truncated library under the name `import runtime` loads.
LINK_TEMP_SUFFIX = ".tmp"
DEPFILE_SUFFIX = ".d"       # the compiler's depfile beside each object
# How the build file marks a stable-ABI namespace (codegen.build reads it back for its notes).
STABLE_MARK = "abi: stable, torch >="


@dataclass(frozen=True)
class BuildInputs:
    """What the build file needs beyond the IR, all paths relative to the repository root."""

    # namespace -> its kernel sources (runtime/csrc/<ns>/**/*.{cpp,cc,cu}), each with the path
    # its object gets below build/obj/<ns>/
    kernel_sources: dict[str, tuple[tuple[str, str], ...]]
    kernel_dirs: tuple[str, ...]                 # every directory searched (their mtimes)
    codegen_args: tuple[str, ...]                # what `python -m codegen generate` is given


def obj(ns: str, source: str, rel: str | None = None) -> str:
    """The object of kernel source `source`; `rel` is its path below its namespace's kernel
    directory (the file name when not given)."""
    name = rel if rel is not None else PurePosixPath(source).name
    stem = name[: -len(".cpp")] if name.endswith(".cpp") else name   # x.cu -> x.cu.o
    return f"{build_dir()}/obj/{ns}/{stem}.o"


def gen_obj(ns: str, generated: str) -> str:
    return f"{build_dir()}/obj/{ns}/gen/{PurePosixPath(generated).stem}.o"


def library_path(ns: str) -> str:
    return f"{config.current().libraries}/{L.library_file(ns)}"


def build_ninja(lib: OpLibrary, inputs: BuildInputs) -> str:
    """The build file's text: a pure function of the library and `inputs`."""
    out = io.StringIO()
    w = ninja_syntax.Writer(out, width=100)
    sources = sorted({f.path for f in lib.files})
    out.write(banner("#", sources))
    w.comment("Build with `python -m codegen.build` (`make build`): it writes the machine's "
              f"toolchain to {toolchain_file()}, then runs `ninja -f {ninja_file()}` in the "
              "repository root.")
    w.newline()
    w.variable("ninja_required_version", "1.10")
    w.variable("builddir", build_dir())
    w.include(toolchain_file())
    w.newline()

    w.comment("Reruns code generation; unchanged files keep their mtime (restat), so nothing "
              "downstream rebuilds.")
    w.comment("Its depfile names every generator module, template and grammar it read: the list "
              "depends on the working tree, so it is not written here.")
    w.rule("codegen", f"$codegen generate --depfile {codegen_depfile()} "
           + " ".join(inputs.codegen_args),
           description="CODEGEN " + " ".join(inputs.codegen_args), generator=True, restat=True,
           depfile=codegen_depfile(), deps="gcc")
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
    w.comment(f"Rule `cu` (CUDA kernels) comes from {toolchain_file()}: nvcc when torch has CUDA, "
              "otherwise a rule that skips the source and says so.")
    w.newline()

    all_shards = L.shards(lib)
    # The completion stamp is written last (Note [Set-atomic writes] in codegen/files.py): an
    # interrupted generate leaves it missing, so this edge reruns before anything compiles.
    generated: list[str] = [ninja_file(), set_stamp()]
    for ns, shs in all_shards.items():
        generated += [s.header for s in shs] + [s.registration for s in shs] + [L.stamp_path(ns)]
        generated += [s.op_header(name) for s in shs for name in L.ops_by_name(s)]
    dirs = sorted({str(PurePosixPath(p).parent) for p in sources})
    w.build(generated, "codegen", sources, implicit=dirs + list(inputs.kernel_dirs))
    w.newline()

    libraries = []
    for ns, shs in all_shards.items():
        headers = [s.header for s in shs]
        a = namespace_abi(lib, ns)
        # Note [ABI choice] in codegen/abi.py: a stable namespace sees only the stable headers
        # (build/stable-include), targets its min_torch, and links no libtorch C++ symbol.
        cflags = {} if a is None else {
            "cflags": f"$stable_cflags -DTORCH_TARGET_VERSION={a.target_version}"}
        cuda = {} if a is None else {
            "cuda_cflags": f"$stable_cuda_cflags -DTORCH_TARGET_VERSION={a.target_version}"}
        w.comment(f"namespace {ns}" + ("" if a is None else
                                       f" ({STABLE_MARK} {a.min_text})"))
        objects = []
        for src, rel in inputs.kernel_sources.get(ns, ()):
            o = obj(ns, src, rel)
            if src.endswith(".cu"):
                w.build(o, "cu", src, order_only=headers, variables=cuda or None)
            else:
                w.build(o, "cxx", src, order_only=headers,
                        variables={"extra_cflags": "$kernel_cflags", **cflags})
            objects.append(o)
        for s in shs:
            o = gen_obj(ns, s.registration)
            w.build(o, "cxx", s.registration, order_only=headers, variables=cflags or None)
            objects.append(o)
        stamp = gen_obj(ns, L.stamp_path(ns))
        w.build(stamp, "stamp", L.stamp_path(ns))
        objects.append(stamp)
        # A stable namespace with CUDA kernels adds the CUDA runtime ($stable_cuda_ldflags,
        # empty where torch has no CUDA and the kernels compile to empty objects).
        has_cu = any(src.endswith(".cu") for src, _ in inputs.kernel_sources.get(ns, ()))
        w.build(library_path(ns), "link", objects,
                variables=None if a is None else {
                    "ldflags": "$stable_ldflags" + (" $stable_cuda_ldflags" if has_cu else "")})
        libraries.append(library_path(ns))
        w.newline()
    w.default(libraries)
    return out.getvalue()


def scan_inputs(lib: OpLibrary, root: Path = Path("."),
                diags: Diagnostics | None = None) -> BuildInputs:
    """Read the disk: kernel sources of each namespace, and the code generator's own files.

    Paths are relative to `root` (the project root, where the CLI and ninja run), so the
    committed build file is machine-independent. With `diags`, kernel sources that belong to no
    namespace and hand-written TORCH_LIBRARY blocks for a generated namespace are errors.
    """
    sources, dirs = kernel_sources(list(lib.namespaces), root, diags)
    if diags is not None:
        check_kernel_sources(sources, set(L.shards(lib)), root, diags)
    return BuildInputs(sources, dirs, _codegen_args(lib, root))


def kernel_sources(namespaces: list[str], root: Path = Path("."),
                   diags: Diagnostics | None = None
                   ) -> tuple[dict[str, tuple[tuple[str, str], ...]], tuple[str, ...]]:
    """(namespace -> ((source, path below its namespace directory), ...), the directories
    searched). Every configured kernel directory is searched recursively; a source in
    `<dir>/<ns>/` belongs to namespace `<ns>`, any other to the library's only namespace.
    Hidden files and directories are skipped."""
    out: dict[str, list[tuple[str, str]]] = {}
    dirs: list[str] = []
    owner: dict[str, str] = {}
    for kdir in config.current().kernels:
        base = root / kdir
        if not base.is_dir():
            continue
        dirs.append(kdir)
        for p in sorted(base.rglob("*")):
            rel = p.relative_to(base)
            if any(part.startswith(".") for part in rel.parts):
                continue
            if p.is_dir():
                dirs.append(f"{kdir}/{rel.as_posix()}")
                continue
            if p.suffix not in KERNEL_SUFFIXES or not p.is_file():
                continue
            source = f"{kdir}/{rel.as_posix()}"
            if len(rel.parts) > 1 and rel.parts[0] in namespaces:
                ns, below = rel.parts[0], PurePosixPath(*rel.parts[1:]).as_posix()
            elif len(namespaces) == 1:
                ns, below = namespaces[0], rel.as_posix()
            else:
                if diags is not None:
                    diags.error(Loc(source, 1, 1), "this kernel source belongs to no namespace: "
                                "the op library has several, and it is not in a directory named "
                                "after one", f"move it to {kdir}/<namespace>/, one of: "
                                + ", ".join(sorted(namespaces)))
                continue
            o = obj(ns, source, below)
            if o in owner:
                if diags is not None:
                    diags.error(Loc(source, 1, 1), f"this kernel source and {owner[o]} would "
                                f"compile to the same object {o}", "rename one of them")
                continue
            owner[o] = source
            out.setdefault(ns, []).append((source, below))
    return {ns: tuple(v) for ns, v in out.items()}, tuple(dirs)


# A hand-written `TORCH_LIBRARY(ns, m)`; TORCH_LIBRARY_FRAGMENT and TORCH_LIBRARY_IMPL are fine.
_TORCH_LIBRARY = re.compile(r"\bTORCH_LIBRARY\s*\(\s*([A-Za-z_]\w*)")
_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)


def check_kernel_sources(sources: dict[str, tuple[tuple[str, str], ...]], generated: set[str],
                         root: Path, diags: Diagnostics) -> None:
    """A `TORCH_LIBRARY(<ns>, m)` block for a namespace whose TORCH_LIBRARY opgen generates
    builds fine and aborts the process at import ("Only a single TORCH_LIBRARY can be used to
    register the namespace"): an error here, at the macro."""
    for ns_sources in sources.values():
        for source, _ in ns_sources:
            try:
                text = (root / source).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if "TORCH_LIBRARY" not in text:
                continue
            # Blank out comments and string literals, keeping every offset.
            code = _COMMENT_OR_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)
            for m in _TORCH_LIBRARY.finditer(code):
                ns = m[1]
                if ns not in generated:
                    continue
                line = code.count("\n", 0, m.start()) + 1
                col = m.start() - (code.rfind("\n", 0, m.start()) + 1) + 1
                diags.add_source(source, text)
                diags.error(Loc(source, line, col, m.end() - m.start()),
                            f"TORCH_LIBRARY({ns}, ...) in a kernel source: opgen generates the "
                            f"TORCH_LIBRARY block of namespace '{ns}' from the op files, and a "
                            "second one aborts the process when the library is loaded",
                            f"delete the block: declare its ops in the op files; kernels it "
                            f"registers by hand may stay in a TORCH_LIBRARY_IMPL({ns}, <key>, m) "
                            "block")


def _codegen_args(lib: OpLibrary, root: Path) -> tuple[str, ...]:
    """The schema directories when the library is every op file in them, else the files."""
    files = sorted({f.path for f in lib.files})
    dirs = sorted({str(PurePosixPath(f).parent) for f in files})
    in_dirs = {str(PurePosixPath(d) / p.name) for d in dirs for p in (root / d).glob("*")
               if p.suffix in (".yaml", ".yml")}
    return tuple(dirs) if in_dirs == set(files) else tuple(files)


def depfile_text(lib: OpLibrary, root: Path = Path(".")) -> str:
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
    project = config.current()
    if project.config_path is not None:
        inputs.add((project.root / project.config_path).resolve())
    deps = sorted(_rel(p, root) for p in inputs if p.is_file())
    return f"{_escape(ninja_file())}: " + " ".join(_escape(d) for d in deps) + "\n"


def _escape(path: str) -> str:
    return path.replace("\\", "\\\\").replace(" ", "\\ ").replace("#", "\\#").replace("$", "$$")


def write_depfile(path: Path, lib: OpLibrary) -> None:
    from codegen.files import write_atomic

    write_atomic(path, depfile_text(lib))


def _rel(p: Path, root: Path) -> str:
    try:
        return p.relative_to(root.resolve()).as_posix()
    except ValueError:
        return p.as_posix()


def generate(lib: OpLibrary, diags: Diagnostics) -> dict[str, str]:
    return {ninja_file(): build_ninja(lib, scan_inputs(lib, diags=diags))}
