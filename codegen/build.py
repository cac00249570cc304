"""`python -m codegen.build`: this machine's toolchain -> `build/toolchain.ninja`, then ninja on
`generated/build.ninja`, with ninja's output shown as it comes.

Note [Toolchain]
`generated/build.ninja` is committed and identical everywhere; what differs per machine (compiler,
ccache, torch's include and library paths, the C++ standard and ABI torch was built with, OpenMP,
CUDA) goes into `build/toolchain.ninja`, taken from `torch.utils.cpp_extension`. Importing torch
costs most of a second, so the file starts with a key digesting everything it was derived from
(this module, the interpreter, torch's version file and library, the environment variables that
pick compilers); while the key matches, torch is not imported and the file is not rewritten, and a
build with nothing to do finishes in a few milliseconds of ninja.

Compiler errors that concern kernels get a note: a kernel defined with the wrong signature (caught
by -Werror=missing-declarations, see codegen/dest/cpp_kernels.py) or never defined (caught at link
time by -Wl,--no-undefined) is named together with its op, the schema's location, and the exact
declaration it must have.

Before ninja runs, the generated set is checked against its completion stamp (Note [Set-atomic
writes] in codegen/files.py): after an interrupted or failed generate, or a generated file changed
since, the stamp is removed, so ninja's `codegen` edge regenerates the set before anything
compiles; a mixed set is never compiled.

Exit status: ninja's (0 on success), 1 when the build cannot start, 3 on an internal error (one
line; the traceback with --debug).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from codegen import config
from codegen.dest.ninja import ninja_file, toolchain_file
from codegen.diagnostics import Diagnostics, UserError
from codegen.files import WriteError, verify_stamp, write_atomic
from codegen.gen import set_stamp

KEY_PREFIX = "# key: "
_ENV_KEYS = ("CXX", "CC", "CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST", "OPGEN_CFLAGS",
             "OPGEN_NVCC_FLAGS", "OPGEN_NO_CCACHE")


# --------------------------------------------------------------------------------------------------
# Toolchain


def _torch_dir() -> Path:
    spec = importlib.util.find_spec("torch")      # locates torch without importing it
    if spec is None or spec.origin is None:
        raise SystemExit("error: torch is not installed in this interpreter "
                         f"({sys.executable}); the C++ build needs its headers and libraries")
    return Path(spec.origin).parent


def toolchain_key() -> str:
    torch_dir = _torch_dir()
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(sys.executable.encode())
    h.update(str(torch_dir).encode())
    for name in ("version.py", "lib/libtorch_cpu.so", "lib/libc10.so"):
        p = torch_dir / name
        try:
            st = p.stat()
            h.update(f"{name}:{st.st_size}:{st.st_mtime_ns}".encode())
        except OSError:
            h.update(f"{name}:missing".encode())
    for k in _ENV_KEYS:
        h.update(f"{k}={os.environ.get(k, '')}".encode())
    h.update(str(shutil.which("ccache")).encode())
    h.update(str(Path(__file__).resolve().parent.parent).encode())
    h.update(config.current().generated.encode())     # the -I of the generated headers
    h.update(f"cuda-arch={config.current().cuda_arch or ''}".encode())
    return h.hexdigest()[:16]


def _q(args: list[str]) -> str:
    """Shell-quoted, with `$` escaped for ninja."""
    return " ".join(shlex.quote(a) for a in args).replace("$", "$$")


@dataclass
class Toolchain:
    torch_version: str
    with_cuda: bool
    text: str


class ToolchainError(Exception):
    """The toolchain cannot be derived (an invalid CUDA architecture list): the message is the
    complete diagnostic, printed as is."""


# Note [CUDA architectures]
# The `-gencode` flags of nvcc come from, in order: the environment's TORCH_CUDA_ARCH_LIST (as
# for torch.utils.cpp_extension), the project's `cuda-arch` ([tool.opgen], docs/CONFIG.md), or
# the architectures the installed torch was built for (torch.cuda.get_arch_list(), which needs no
# GPU). torch's helper turns the list into flags; a list it rejects is an error naming where the
# list came from, never a silent fallback to nvcc's default architecture.
def _torch_arch_list(torch) -> str:
    arches = list(torch.cuda.get_arch_list())
    if not arches:     # older torch answers [] without a GPU; the build's own flags remain
        arches = str(torch._C._cuda_getArchFlags() or "").split()
    out: list[str] = []
    for a in arches:
        m = re.fullmatch(r"(sm|compute)_(\d+?)(\d)([af]?)", a)
        if m is None:
            continue
        version = f"{m[2]}.{m[3]}{m[4]}"
        if m[1] == "compute":
            out = [v for v in out if v != version] + [f"{version}+PTX"]
        elif version not in out and f"{version}+PTX" not in out:
            out.append(version)
    return ";".join(out)


def cuda_arch_flags(torch, cpp_extension) -> tuple[list[str], str]:
    """(nvcc's -gencode flags, where the list came from); see Note [CUDA architectures]."""
    project = config.current()
    env = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if env:
        arch, origin = env, f"TORCH_CUDA_ARCH_LIST={env}"
    elif project.cuda_arch:
        arch, origin = project.cuda_arch, "[tool.opgen] cuda-arch"
    else:
        arch, origin = _torch_arch_list(torch), f"the architectures torch {torch.__version__} " \
            "was built for"
    if not arch:
        raise ToolchainError(
            f"error: torch {torch.__version__} names no CUDA architecture to compile for\n"
            "hint: set TORCH_CUDA_ARCH_LIST (e.g. \"8.0;9.0+PTX\") or `cuda-arch` in "
            "[tool.opgen]; see docs/CONFIG.md")
    saved = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    try:
        flags = cpp_extension._get_cuda_arch_flags()
    except ValueError as e:
        raise ToolchainError(_arch_error(str(e), arch, origin, project)) from None
    finally:
        if saved is None:
            del os.environ["TORCH_CUDA_ARCH_LIST"]
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = saved
    return flags, origin


def _arch_error(reason: str, arch: str, origin: str, project: config.Project) -> str:
    hint = ("hint: write architectures as torch.utils.cpp_extension takes them: versions "
            "such as \"8.0;8.6;9.0+PTX\" or names such as \"Ampere;Hopper\"")
    if origin.startswith("[tool.opgen]") and project.config_path is not None:
        diags = Diagnostics()
        loc = config.locate_value(project, "cuda-arch", diags)
        diags.error(loc, f"invalid CUDA architecture list '{arch}': {reason}", hint[6:])
        return diags.render()
    return f"error: invalid CUDA architecture list from {origin}: {reason}\n{hint}"


def _cudart_flags(cuda_home: Path) -> list[str]:
    """Link flags for the CUDA runtime of the toolkit at `cuda_home`: `lib64/` of a system
    toolkit, `lib/` of the cuda-toolkit wheels, which ship only the versioned libcudart.so.N."""
    for sub in ("lib64", "lib"):
        d = cuda_home / sub
        if (d / "libcudart.so").exists():
            return [f"-L{d}", "-lcudart"]
        versioned = sorted(d.glob("libcudart.so.*"))
        if versioned:
            return [f"-L{d}", f"-l:{versioned[0].name}"]
    return [f"-L{cuda_home / 'lib64'}", "-lcudart"]


def _nvcc_passthrough(flags: list[str]) -> list[str]:
    """OPGEN_CFLAGS for nvcc: defines and include directories it takes itself, every other flag
    for the host compiler (-Xcompiler)."""
    out: list[str] = []
    it = iter(flags)
    for f in it:
        if f in ("-D", "-U", "-I", "-isystem"):
            out += [f, next(it, "")]
        elif f.startswith(("-D", "-U", "-I", "-isystem")):
            out.append(f)
        else:
            out += ["-Xcompiler", f]
    return out


def make_toolchain(key: str) -> Toolchain:
    """Derive the toolchain from torch.utils.cpp_extension (imports torch)."""
    import torch
    from torch.utils import cpp_extension

    torch_version = torch.__version__
    # The C++ standard cpp_extension compiles extensions with (C++20 since torch 2.10ish).
    ext_source = Path(cpp_extension.__file__).read_text(encoding="utf-8")
    std = "c++20" if "-std=c++20" in ext_source else "c++17"
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    openmp = torch.backends.openmp.is_available()
    torch_cuda = torch.version.cuda is not None
    with_cuda = torch_cuda and cpp_extension.CUDA_HOME is not None
    includes = cpp_extension.include_paths("cuda" if with_cuda else "cpu")
    lib_dirs = cpp_extension.library_paths("cuda" if with_cuda else "cpu")

    cxx = shlex.split(os.environ.get("CXX", "c++"))
    ccache = shutil.which("ccache") if not os.environ.get("OPGEN_NO_CCACHE") else None
    launcher = [ccache] if ccache else []
    version_def = f'-DOPGEN_TORCH_VERSION="{torch_version}"'
    defines = [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", version_def]
    if with_cuda:
        defines.append("-DOPGEN_WITH_CUDA")
    user_cflags = shlex.split(os.environ.get("OPGEN_CFLAGS", ""))
    cflags = ([f"-std={std}", "-fPIC", "-O3", "-Wall", "-Wextra"] + defines
              + (["-fopenmp"] if openmp else [])
              + [f for inc in includes for f in ("-isystem", inc)]
              + ["-I", f"{config.current().generated}/cpp"]
              + user_cflags)
    ldflags = ([f"-L{d}" for d in lib_dirs] + ["-lc10", "-ltorch_cpu", "-ltorch"]
               + (["-lc10_cuda", "-ltorch_cuda"] if with_cuda else [])
               + [f"-Wl,-rpath,{d}" for d in lib_dirs]
               + ["-Wl,--no-undefined"] + (["-fopenmp"] if openmp else []))

    # Note [Stable include root]: stable-ABI namespaces see only torch's stable headers, no
    # Python headers, no OpenMP, and link libtorch_cpu (which holds the C shim) for its C
    # symbols alone; the C++ standard library ABI does not cross the stable boundary.
    stable_cflags = ([f"-std={std}", "-fPIC", "-O3", "-Wall", "-Wextra", "-fvisibility=hidden",
                      "-isystem", stable_include(), "-I", f"{config.current().generated}/cpp"]
                     + (["-DOPGEN_WITH_CUDA"] if with_cuda else []) + user_cflags)
    stable_ldflags = ([f"-L{d}" for d in lib_dirs] + ["-ltorch_cpu"]
                      + [f"-Wl,-rpath,{d}" for d in lib_dirs] + ["-Wl,--no-undefined"])
    lines = [
        f"# Toolchain for {ninja_file()} on this machine, written by `python -m codegen.build` "
        "from torch.utils.cpp_extension. Not committed.",
        f"{KEY_PREFIX}{key}",
        f"torch_version = {torch_version}",
        f"codegen = {_codegen_command()}",
        f"cxx = {_q(launcher + cxx)}",
        f"cflags = {_q(cflags)}",
        "kernel_cflags = -Werror=missing-declarations",
        f"stamp_cflags = {_q(['-fPIC', version_def])}",
        f"ldflags = {_q(ldflags)}",
        f"stable_cflags = {_q(stable_cflags)}",
        f"stable_ldflags = {_q(stable_ldflags)}",
        "",
    ]
    if with_cuda:
        cuda_home = Path(cpp_extension.CUDA_HOME)
        nvcc = str(cuda_home / "bin" / "nvcc")
        arch, arch_origin = cuda_arch_flags(torch, cpp_extension)
        # nvcc's host compiler: CC when set, as torch.utils.cpp_extension does.
        ccbin = ["-ccbin", os.environ["CC"]] if os.environ.get("CC") else []
        user_nvcc = _nvcc_passthrough(user_cflags) + shlex.split(
            os.environ.get("OPGEN_NVCC_FLAGS", ""))
        # -O3 as for C++ sources (nvcc otherwise leaves the host code unoptimized, and every
        # std:: inline function it did not inline an exported weak symbol).
        common = (ccbin + list(cpp_extension.COMMON_NVCC_FLAGS) + arch + [f"-std={std}", "-O3"]
                  + ["--compiler-options", "-fPIC", "-Xcompiler", "-Werror=missing-declarations"])
        cuda_flags = (common + defines
                      + [f for inc in includes for f in ("-isystem", inc)]
                      + ["-I", f"{config.current().generated}/cpp"] + user_nvcc)
        # Stable .cu files: the stable headers, hidden symbols like the stable .cpp files, and
        # USE_CUDA for the C shim's CUDA stream API (Note [Stable CUDA] in docs/STABLE_ABI.md).
        stable_cuda = (common + ["-Xcompiler", "-fvisibility=hidden",
                                 "-Xcompiler", "-fvisibility-inlines-hidden", "-DOPGEN_WITH_CUDA",
                                 "-DUSE_CUDA", "-isystem", stable_include(),
                                 "-I", f"{config.current().generated}/cpp"] + user_nvcc)
        cudart = _cudart_flags(cuda_home)
        lines += [
            f"# CUDA architectures: {arch_origin}",
            f"stable_cuda_cflags = {_q(stable_cuda)}",
            # A stable namespace with CUDA kernels also needs the CUDA runtime and the C shim's
            # CUDA half (aoti_torch_get_current_cuda_stream, C symbols of libtorch_cuda).
            f"stable_cuda_ldflags = {_q(cudart + ['-ltorch_cuda'])}",
            f"nvcc = {_q(launcher + [nvcc])}",
            f"cuda_cflags = {_q(cuda_flags)}",
            f"ldflags = $ldflags {_q(cudart)}",
            "rule cu",
            "  command = $nvcc --generate-dependencies-with-compile --dependency-output $out.d "
            "$cuda_cflags -c $in -o $out",
            "  depfile = $out.d",
            "  deps = gcc",
            "  description = NVCC $in",
        ]
    else:
        why = (f"torch {torch_version} has CUDA {torch.version.cuda} but no CUDA toolkit (nvcc) "
               "was found" if torch_cuda else f"torch {torch_version} has no CUDA support")
        lines += [
            f"cuda_skip = {why}",
            "# CUDA kernel sources compile to empty objects, and the registration units leave",
            "# out their CUDA blocks (no -DOPGEN_WITH_CUDA).",
            "rule cu",
            "  command = $cxx -x c++ -c /dev/null -o $out",
            "  description = SKIP $in (no CUDA build)",
        ]
    return Toolchain(torch_version, with_cuda, "\n".join(lines) + "\n")


# Note [Stable include root]
# A stable-ABI namespace is compiled with `-isystem <build>/stable-include` and none of torch's
# other include directories. The directory links exactly the headers torch's stable ABI is made
# of, so `#include <ATen/...>` (or c10, torch/extension.h, Python.h) in a kernel source of such a
# namespace fails with "No such file or directory", and run_ninja explains why.
def stable_include() -> str:
    return f"{config.current().build}/stable-include"
STABLE_HEADERS = ("torch/csrc/stable", "torch/headeronly", "torch/csrc/inductor/aoti_torch/c",
                  "torch/csrc/inductor/aoti_torch/generated/c_shim_aten.h")


def write_stable_include(root: Path) -> None:
    """Link build/stable-include/<header> to torch's for each of STABLE_HEADERS (idempotent)."""
    torch_include = _torch_dir() / "include"
    for rel in STABLE_HEADERS:
        link = root / stable_include() / rel
        target = torch_include / rel
        if link.is_symlink() and os.readlink(link) == str(target):
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(link.name + ".tmp")
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(target)
        tmp.replace(link)


def _codegen_command() -> str:
    package_parent = str(Path(__file__).resolve().parent.parent)
    # ninja runs commands with /bin/sh: keep the user's PYTHONPATH after ours.
    return (f"env PYTHONPATH={shlex.quote(package_parent)}$${{PYTHONPATH:+:$$PYTHONPATH}} "
            f"{shlex.quote(sys.executable)} -m codegen")


def write_toolchain(root: Path) -> tuple[bool, str]:
    """(whether the file was rewritten, its text). Imports torch only when the key changed."""
    path = root / toolchain_file()
    key = toolchain_key()
    try:
        old = path.read_text(encoding="utf-8")
    except OSError:
        old = None
    if old is not None and f"\n{KEY_PREFIX}{key}\n" in old:
        return False, old
    text = make_toolchain(key).text
    if text == old:
        return False, old
    write_atomic(path, text)
    return True, text


def toolchain_var(text: str, name: str) -> str | None:
    m = re.search(rf"^{re.escape(name)} = (.*)$", text, re.M)
    return m.group(1) if m else None


# --------------------------------------------------------------------------------------------------
# Kernel notes for compiler and linker errors


@dataclass(frozen=True)
class KernelInfo:
    qualified: str            # exops::scaled_add_cpu
    uses: tuple[str, ...]     # "CPU kernel of exops::scaled_add (schemas/core.yaml:9)"
    schema: str
    decl: str
    header: str
    line: int


_NAMESPACE_OPEN = re.compile(r"^namespace ([\w:]+) \{$")
_USE = re.compile(r"^// (\w+ kernel of .+)$")
_SCHEMA = re.compile(r"^//   (.+)$")
_DECL = re.compile(r"^(.+?)\b(\w+)\((.*)\);$")


_SOURCE = re.compile(r"^// C\+\+ kernels and typed calls for (\S+) of (.+)\.$")
# A stable-ABI library declares a file's kernels in one header (codegen.dest.cpp_stable).
_STABLE_SOURCE = re.compile(r"^// C\+\+ kernels of the ops of (\S+) \(namespace \w+\)")


def kernel_index(root: Path) -> dict[str, list[KernelInfo]]:
    """Kernel name -> its declarations, read back from the generated headers (each op name's
    header below `generated/cpp/<ns>/<file>/`; a stable library's one header per op file,
    `generated/cpp/<ns>/<file>.h`)."""
    out: dict[str, list[KernelInfo]] = {}
    cpp = root / config.current().generated / "cpp"
    for header in sorted([*cpp.glob("*/*/*.h"), *cpp.glob("*/*.h")]):
        ns = ""
        uses: list[str] = []
        schema = ""
        source = ""
        for i, line in enumerate(header.read_text(encoding="utf-8").splitlines(), 1):
            if m := _SOURCE.match(line):
                source = m.group(2)
            elif m := _STABLE_SOURCE.match(line):
                source = m.group(1)
            elif m := _NAMESPACE_OPEN.match(line):
                ns = m.group(1)
            elif line.startswith("}  // namespace"):
                ns = ""
            elif m := _USE.match(line):
                uses.append(m.group(1))
            elif uses and (m := _SCHEMA.match(line)):
                schema = m.group(1)
            elif uses and (m := _DECL.match(line)):
                q = f"{ns}::{m.group(2)}" if ns else m.group(2)
                info = KernelInfo(q, tuple(_located(root, source, u) for u in uses), schema,
                                  line, header.relative_to(root).as_posix(), i)
                out.setdefault(q, []).append(info)
                uses = []
            elif not line.startswith("//"):
                uses = []
    return out


_USE_PARTS = re.compile(r"^(\w+) kernel of (\S+)$")


def _located(root: Path, source: str, use: str) -> str:
    """`use` ("CPU kernel of ns::op") with the line of the op file naming the kernel. Headers
    carry no line numbers (Note [Headers that change only with C++] in codegen.dest.cpp_kernels),
    so the op file is read again; an op file that no longer loads leaves the use as it is."""
    m = _USE_PARTS.match(use)
    locs = _kernel_locations(str(root), source) if m and source else {}
    loc = locs.get((m.group(2), m.group(1))) if m else None
    return f"{use} ({source}:{loc})" if loc is not None else use


@functools.lru_cache(maxsize=None)
def _kernel_locations(root: str, source: str) -> dict[tuple[str, str], int]:
    """(qualified op name, dispatch key) -> the line of its kernel in op file `source`."""
    from codegen.diagnostics import UserError
    from codegen.load import load_library

    try:
        lib = load_library([str(Path(root) / source)])
    except (UserError, OSError):
        return {}
    return {(str(op.name), key.value): kernel.loc.line
            for op in lib.ops for key, kernel in op.dispatch}


_MISSING_DECL = re.compile(r"^(?P<where>\S+:\d+:\d+): error: no previous declaration for "
                           r"[‘'`](?P<decl>.+?)[’'] \[-Werror=missing-declarations\]")
_AMBIGUATING = re.compile(r"^(?P<where>\S+:\d+:\d+): error: ambiguating new declaration of "
                          r"[‘'`](?P<decl>.+?)[’']")
_UNDEFINED = re.compile(r"undefined reference to [‘'`](?P<decl>.+?)[’']")
_QNAME = re.compile(r"([\w:]+)\(")
_SOURCE_EXCERPT = re.compile(r"^\s*\d*\s*\|")   # gcc's `  5 | code` and `    |   ^~~` lines


def _qualified_name(decl: str) -> str | None:
    m = _QNAME.search(decl)
    return m.group(1).lstrip(":") if m else None


_MISSING_HEADER = re.compile(r"^(?P<where>(?P<file>\S+?):\d+:\d+): fatal error: (?P<header>\S+): "
                             r"No such file or directory")
_STABLE_NS = re.compile(r"^# namespace (\w+) \(abi: stable, torch >= ([\d.]+)\)$", re.M)


def stable_namespaces(root: Path) -> dict[str, str]:
    """namespace -> min_torch of the stable-ABI namespaces, as generated/build.ninja marks them."""
    try:
        text = (root / ninja_file()).read_text(encoding="utf-8")
    except OSError:
        return {}
    return dict(_STABLE_NS.findall(text))


def stable_header_note(line: str, stable: dict[str, str]) -> str | None:
    """The note after a missing-header error in a source of a stable-ABI namespace."""
    m = _MISSING_HEADER.search(line)
    if m is None:
        return None
    parts = Path(m["file"]).parts
    ns = next((parts[i + 1] for i in range(len(parts) - 1)
               if parts[i] in ("csrc", "cpp") and parts[i + 1] in stable), None)
    if ns is None:
        return None
    header = m["header"].strip("<>\"'‘’")
    return (f"{m['where']}: note: <{header}> is not part of torch's stable ABI; namespace '{ns}' "
            f"is built with 'abi: stable' (torch >= {stable[ns]}), so its sources see only "
            "torch/csrc/stable/* and torch/headeronly/* (no ATen, c10, torch/extension.h or "
            "Python.h)\nhint: use the stable API (torch::stable::Tensor, torch/csrc/stable/ops.h, "
            "torch/headeronly/...), or build the namespace on the full API (remove 'abi: stable' "
            "and 'min_torch' from its op files); see docs/STABLE_ABI.md")


def _kernel_dirs() -> str:
    dirs = config.current().kernels
    return ", ".join(dirs) if dirs else "a kernel directory ([tool.opgen] kernels names none)"


def kernel_note(line: str, index: dict[str, list[KernelInfo]]) -> str | None:
    """The note to print after a compiler/linker error line about a kernel, if it is one."""
    for pattern, kind in ((_MISSING_DECL, "signature"), (_AMBIGUATING, "signature"),
                          (_UNDEFINED, "undefined")):
        m = pattern.search(line)
        if m:
            break
    else:
        return None
    qname = _qualified_name(m.group("decl"))
    if qname is None:
        return None
    where = m.groupdict().get("where")
    prefix = f"{where}: note: " if where else "note: "
    infos = index.get(qname)
    if not infos:
        if kind == "undefined":
            return None
        fix = ("make it 'static' (nvcc turns anonymous namespaces into named ones)"
               if where and where.split(":")[0].endswith(".cu")
               else "make it 'static' or move it into an anonymous namespace")
        return (f"{prefix}'{qname}' is not a kernel named in the op files; functions in kernel "
                f"sources other than kernels need internal linkage\nhint: {fix}")
    parts = []
    for info in infos:
        what = "; ".join(info.uses)
        if kind == "undefined":
            parts.append(f"{prefix}'{qname}' is the {what}, declared in {info.header}:{info.line} "
                         f"but defined by no kernel source; define it as\n    {info.decl}\n"
                         f"  in a kernel source under {_kernel_dirs()}")
        else:
            parts.append(f"{prefix}'{qname}' is the {what}; for the schema\n"
                         f"    {info.schema}\n"
                         f"  the dispatcher calls it as ({info.header}:{info.line})\n"
                         f"    {info.decl}")
    parts.append("hint: change the definition to match, or the schema in the op file")
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------------
# Running ninja


def ninja_binary() -> str:
    try:
        import ninja

        candidate = Path(ninja.BIN_DIR) / "ninja"
        if candidate.is_file():
            return str(candidate)
    except ImportError:
        pass
    found = shutil.which("ninja")
    if found is None:
        raise SystemExit("error: ninja is not installed (pip install ninja)")
    return found


def generated_namespaces(root: Path) -> list[str]:
    """The namespaces of the generated set (one directory each under <generated>/cpp)."""
    base = root / config.current().generated / "cpp"
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def cuda_sources(root: Path) -> list[str]:
    from codegen.dest.ninja import kernel_sources

    sources, _ = kernel_sources(generated_namespaces(root), root)
    return sorted(s for v in sources.values() for s, _ in v if s.endswith(".cu"))


def check_sources(root: Path) -> None:
    """UserError for kernel sources that would build and then abort at import (a hand-written
    TORCH_LIBRARY block for a namespace opgen generates)."""
    from codegen.dest.ninja import check_kernel_sources, kernel_sources

    namespaces = generated_namespaces(root)
    diags = Diagnostics()
    sources, _ = kernel_sources(namespaces, root)
    check_kernel_sources(sources, set(namespaces), root, diags)
    diags.raise_if_errors()


def run_ninja(root: Path, extra: list[str], *, out=None) -> int:
    out = out or sys.stdout
    index: dict[str, list[KernelInfo]] | None = None
    stable: dict[str, str] = {}
    proc = subprocess.Popen([ninja_binary(), "-f", ninja_file(), *extra], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", bufsize=1)
    assert proc.stdout is not None
    pending: str | None = None      # a note waits until the compiler has shown its source lines
    for line in proc.stdout:
        if pending is not None and not _SOURCE_EXCERPT.match(line):
            out.write(pending + "\n")
            pending = None
        out.write(line)
        if "error" in line or "undefined reference" in line:
            if index is None:
                index = kernel_index(root)
                stable = stable_namespaces(root)
            note = kernel_note(line.rstrip("\n"), index) or \
                stable_header_note(line.rstrip("\n"), stable)
            if note:
                if pending is not None:
                    out.write(pending + "\n")
                pending = note
        out.flush()
    if pending is not None:
        out.write(pending + "\n")
    return proc.wait()


def check_generated(root: Path, out) -> bool:
    """Make ninja regenerate a generated set that is not the one its stamp records: without
    the stamp, an output of the `codegen` edge is missing, so that edge runs first. False when
    that cannot work (a build file older than the stamp), with the error written."""
    stamp = set_stamp()
    problem = verify_stamp(root, stamp)
    if problem is None:
        return True
    if stamp not in (root / ninja_file()).read_text(encoding="utf-8", errors="replace"):
        out.write(f"error: {problem}, and {ninja_file()} is too old to regenerate it\n"
                  "hint: run `make codegen` (python -m codegen generate)\n")
        return False
    out.write(f"note: {problem}; regenerating before the build\n")
    try:
        (root / stamp).unlink()
    except FileNotFoundError:
        pass
    return True


def build(root: Path, extra: list[str] | None = None, *, out=None) -> int:
    out = out or sys.stdout
    if not (root / ninja_file()).is_file():
        out.write(f"error: {ninja_file()} not found under {root}\n"
                  "hint: run `make codegen` (python -m codegen generate) first\n")
        return 1
    if not check_generated(root, out):
        return 1
    try:
        check_sources(root)
    except UserError as e:
        out.write(e.diags.render() + "\n")
        return 1
    try:
        _written, text = write_toolchain(root)
    except ToolchainError as e:
        out.write(f"{e}\n")
        return 1
    if stable_namespaces(root):
        write_stable_include(root)
    if toolchain_var(text, "nvcc") is None:
        skipped = cuda_sources(root)
        if skipped:
            why = toolchain_var(text, "cuda_skip") or "no CUDA build"
            hint = ("\nhint: install the CUDA toolkit (or pip install 'cuda-toolkit[nvcc,cccl]') "
                    "and set CUDA_HOME to its directory" if "nvcc" in why else "")
            out.write(f"note: {why}: skipping CUDA kernels ({', '.join(skipped)}); their ops "
                      f"get no CUDA kernel in this build{hint}\n")
    out.flush()
    return run_ninja(root, list(extra or []), out=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen.build",
                                     description=__doc__.splitlines()[0])
    project_option(parser)
    add_arguments(parser)
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an internal error")
    args = parser.parse_args(argv)
    return run(args)


def project_option(parser: argparse.ArgumentParser, default=None) -> None:
    parser.add_argument("--project", "--root", dest="project", metavar="DIR", default=default,
                        help="the project's directory (default: the nearest pyproject.toml with "
                        "[tool.opgen] upward from here; `--root` is the old name)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The build's own options (also those of `opgen build`)."""
    parser.add_argument("-j", "--jobs", type=int, help="parallel jobs (ninja's default otherwise)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show full command lines")
    parser.add_argument("targets", nargs="*", help="ninja targets (default: every library)")


def run(args: argparse.Namespace) -> int:
    extra = (["-j", str(args.jobs)] if args.jobs else []) + (["-v"] if args.verbose else [])
    try:
        project = config.resolve(args.project, Diagnostics())
        with config.use(project):
            return build(project.root, extra + args.targets)
    except UserError as e:
        print(e.diags.render(), file=sys.stderr)
        return 1
    except (WriteError, OSError) as e:
        # The disk, not the code: a build directory that cannot be written, a missing compiler.
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001  (the one place that catches everything)
        from codegen.__main__ import internal_error

        return internal_error(e, args.debug)


if __name__ == "__main__":
    sys.exit(main())
