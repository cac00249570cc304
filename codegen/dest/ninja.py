"""Op library IR + the kernel sources on disk -> `generated/build.ninja`: one shared library per op
namespace, `build/lib<ns>_ops.so`, from the hand-written kernels in `runtime/csrc/<ns>/` (`*.cpp`,
and `*.cu` for CUDA) and the generated registration shards and stamp.

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
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ninja import ninja_syntax

from codegen.abi import namespace_abi
from codegen.dest import cpp_library as L
from codegen.diagnostics import Diagnostics
from codegen.gen import OUTPUT_DIR, SET_STAMP, banner
from codegen.model import OpLibrary

BUILD_DIR = "build"
TOOLCHAIN = f"{BUILD_DIR}/toolchain.ninja"
NINJA_FILE = f"{OUTPUT_DIR}/build.ninja"
CODEGEN_DEPFILE = f"{BUILD_DIR}/codegen.d"
KERNEL_ROOT = "runtime/csrc"
KERNEL_SUFFIXES = (".cpp", ".cu")
# The linker writes here, then the file is renamed: a link killed midway, or one that fills the
# disk, never leaves a truncated library under the name `import runtime` loads.
LINK_TEMP_SUFFIX = ".tmp"
DEPFILE_SUFFIX = ".d"       # the compiler's depfile beside each object
# How the build file marks a stable-ABI namespace (codegen.build reads it back for its notes).
STABLE_MARK = "abi: stable, torch >="


@dataclass(frozen=True)
class BuildInputs:
    """What the build file needs beyond the IR, all paths relative to the repository root."""

    kernel_sources: dict[str, tuple[str, ...]]   # namespace -> runtime/csrc/<ns>/*.{cpp,cu}
    kernel_dirs: tuple[str, ...]                 # the existing runtime/csrc/<ns> directories
    codegen_args: tuple[str, ...]                # what `python -m codegen generate` is given


def obj(ns: str, source: str) -> str:
    name = PurePosixPath(source).name
    stem = name[: -len(".cpp")] if name.endswith(".cpp") else name   # x.cu -> x.cu.o
    return f"{BUILD_DIR}/obj/{ns}/{stem}.o"


def gen_obj(ns: str, generated: str) -> str:
    return f"{BUILD_DIR}/obj/{ns}/gen/{PurePosixPath(generated).stem}.o"


def library_path(ns: str) -> str:
    return f"{BUILD_DIR}/{L.library_file(ns)}"


def build_ninja(lib: OpLibrary, inputs: BuildInputs) -> str:
    """The build file's text: a pure function of the library and `inputs`."""
    out = io.StringIO()
    w = ninja_syntax.Writer(out, width=100)
    sources = sorted({f.path for f in lib.files})
    out.write(banner("#", sources))
    w.comment("Build with `python -m codegen.build` (`make build`): it writes the machine's "
              f"toolchain to {TOOLCHAIN}, then runs `ninja -f {NINJA_FILE}` in the repository "
              "root.")
    w.newline()
    w.variable("ninja_required_version", "1.10")
    w.variable("builddir", BUILD_DIR)
    w.include(TOOLCHAIN)
    w.newline()

    w.comment("Reruns code generation; unchanged files keep their mtime (restat), so nothing "
              "downstream rebuilds.")
    w.comment("Its depfile names every generator module, template and grammar it read: the list "
              "depends on the working tree, so it is not written here.")
    w.rule("codegen", f"$codegen generate --depfile {CODEGEN_DEPFILE} "
           + " ".join(inputs.codegen_args),
           description="CODEGEN " + " ".join(inputs.codegen_args), generator=True, restat=True,
           depfile=CODEGEN_DEPFILE, deps="gcc")
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
    w.comment(f"Rule `cu` (CUDA kernels) comes from {TOOLCHAIN}: nvcc when torch has CUDA, "
              "otherwise a rule that skips the source and says so.")
    w.newline()

    all_shards = L.shards(lib)
    # The completion stamp is written last (Note [Set-atomic writes] in codegen/files.py): an
    # interrupted generate leaves it missing, so this edge reruns before anything compiles.
    generated: list[str] = [NINJA_FILE, SET_STAMP]
    for ns, shs in all_shards.items():
        generated += [s.header for s in shs] + [s.registration for s in shs] + [L.stamp_path(ns)]
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
        for src in inputs.kernel_sources.get(ns, ()):
            o = obj(ns, src)
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
        w.build(library_path(ns), "link", objects,
                variables=None if a is None else {"ldflags": "$stable_ldflags"})
        libraries.append(library_path(ns))
        w.newline()
    w.default(libraries)
    return out.getvalue()


def scan_inputs(lib: OpLibrary, root: Path = Path(".")) -> BuildInputs:
    """Read the disk: kernel sources of each namespace, and the code generator's own files.

    Paths are relative to `root` (the repository root, where the CLI and ninja run) where they
    lie below it, so the committed build file is machine-independent.
    """
    kernel_sources: dict[str, tuple[str, ...]] = {}
    kernel_dirs = []
    for ns in lib.namespaces:
        d = root / KERNEL_ROOT / ns
        if d.is_dir():
            kernel_dirs.append(f"{KERNEL_ROOT}/{ns}")
            kernel_sources[ns] = tuple(sorted(
                f"{KERNEL_ROOT}/{ns}/{p.name}" for p in d.iterdir()
                if p.is_file() and p.suffix in KERNEL_SUFFIXES and not p.name.startswith(".")))
    return BuildInputs(kernel_sources, tuple(kernel_dirs), _codegen_args(lib, root))


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
    for pattern in ("templates/*.j2", "grammar/*.lark", "*.json"):
        inputs.update(p.resolve() for p in package.glob(pattern))
    deps = sorted(_rel(p, root) for p in inputs if p.is_file())
    return f"{_escape(NINJA_FILE)}: " + " ".join(_escape(d) for d in deps) + "\n"


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
    return {NINJA_FILE: build_ninja(lib, scan_inputs(lib))}
