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
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from codegen import cli, config
from codegen import layout as L
from codegen.dest.ninja import (blank_comments_and_strings, check_kernel_sources,
                                indexed_registrations, kernel_sources, ninja_file,
                                toolchain_file)
from codegen.diagnostics import Diagnostics, UserError
from codegen.files import verify_stamp, write_atomic
from codegen.rendering import set_stamp

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
    # What the full and stable flags (C++ and CUDA) share.
    torch_includes = [f for inc in includes for f in ("-isystem", inc)]
    generated_include = ["-I", f"{config.current().generated}/cpp"]
    base_cflags = [f"-std={std}", "-fPIC", "-O3", "-Wall", "-Wextra"]
    link_dirs = [f"-L{d}" for d in lib_dirs]
    link_checks = rpath_link(lib_dirs) + ["-Wl,--no-undefined"]
    cflags = (base_cflags + defines + (["-fopenmp"] if openmp else []) + torch_includes
              + generated_include + user_cflags)
    ldflags = (link_dirs + ["-lc10", "-ltorch_cpu", "-ltorch"]
               + (["-lc10_cuda", "-ltorch_cuda"] if with_cuda else [])
               + link_checks + (["-fopenmp"] if openmp else []))

    # Note [Stable include root]: stable-ABI namespaces see only torch's stable headers, no
    # Python headers, no OpenMP, and link libtorch_cpu (which holds the C shim) for its C
    # symbols alone; the C++ standard library ABI does not cross the stable boundary.
    stable_cflags = (base_cflags + ["-fvisibility=hidden", "-isystem", stable_include()]
                     + generated_include + (["-DOPGEN_WITH_CUDA"] if with_cuda else [])
                     + user_cflags)
    stable_ldflags = link_dirs + ["-ltorch_cpu"] + link_checks
    lines = [
        f"# Toolchain for {ninja_file(config.current())} on this machine, written by "
        "`python -m codegen.build` "
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
        cuda_flags = common + defines + torch_includes + generated_include + user_nvcc
        # Stable .cu files: the stable headers, hidden symbols like the stable .cpp files, and
        # USE_CUDA for the C shim's CUDA stream API (Note [Stable CUDA] in docs/STABLE_ABI.md).
        stable_cuda = (common + ["-Xcompiler", "-fvisibility=hidden",
                                 "-Xcompiler", "-fvisibility-inlines-hidden", "-DOPGEN_WITH_CUDA",
                                 "-DUSE_CUDA", "-isystem", stable_include()]
                       + generated_include + user_nvcc)
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


def rpath_link(lib_dirs: list[str]) -> list[str]:
    """Where the linker finds torch's libraries' own dependencies, without a RUNPATH: a library
    is loaded after `import torch` (the generated loader imports it first), so its DT_NEEDED
    torch libraries are already in the process; a RUNPATH would only write this machine's
    paths into every wheel."""
    return [f"-Wl,-rpath-link,{d}" for d in lib_dirs]


# Note [Stable include root]
# A stable-ABI namespace is compiled with `-isystem <build>/stable-include` and none of torch's
# other include directories. The directory links exactly the headers torch's stable ABI is made
# of, so `#include <ATen/...>` (or c10, torch/extension.h, Python.h) in a kernel source of such a
# namespace fails with "No such file or directory", and run_ninja explains why.
def stable_include() -> str:
    return f"{config.current().build}/stable-include"


def write_stable_include(root: Path) -> None:
    """Link build/stable-include/<header> to torch's for each of STABLE_HEADERS (idempotent)."""
    torch_include = _torch_dir() / "include"
    for rel in L.STABLE_HEADERS:
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
    path = root / toolchain_file(config.current())
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


def namespace_indexes(root: Path) -> list[dict]:
    """What generation wrote for the build about each namespace (`generated/cpp/<ns>/index.json`,
    codegen.dest.cpp_kernel_index)."""
    out = []
    for path in sorted((root / config.current().generated / "cpp").glob("*/index.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue    # a set generation left broken is regenerated before anything compiles
        if isinstance(doc, dict) and isinstance(doc.get("kernels"), list):
            out.append(doc)
    return out


def kernel_index(root: Path) -> dict[str, list[KernelInfo]]:
    """Kernel name -> its declarations (from namespace_indexes)."""
    out: dict[str, list[KernelInfo]] = {}
    for doc in namespace_indexes(root):
        for r in doc["kernels"]:
            info = KernelInfo(r["kernel"], tuple(_located(root, r["source"], u) for u in r["uses"]),
                              r["schema"], r["decl"], r["header"], r["line"])
            out.setdefault(info.qualified, []).append(info)
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
def stable_namespaces(root: Path) -> dict[str, str]:
    """namespace -> min_torch of the stable-ABI namespaces."""
    return {d["namespace"]: d["min_torch"] for d in namespace_indexes(root) if d["abi"] == "stable"}


def stable_header_note(line: str, stable: dict[str, str], ns: str | None = None) -> str | None:
    """The note after a missing-header error in a source of a stable-ABI namespace (`ns`, the
    namespace of the source; else guessed from a `csrc/<ns>/` or `cpp/<ns>/` in its path)."""
    m = _MISSING_HEADER.search(line)
    if m is None:
        return None
    if ns is None:
        parts = Path(m["file"]).parts
        ns = next((parts[i + 1] for i in range(len(parts) - 1)
                   if parts[i] in ("csrc", "cpp") and parts[i + 1] in stable), None)
    if ns is None or ns not in stable:
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


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)


def includes(source: Path, header: Path, root: Path) -> bool | None:
    """Whether `source` includes `header`, directly or through the project's own headers (a
    `"..."` include beside the including file, or one under the generated include root); None
    when `source` cannot be read. Conditional compilation is not looked at."""
    generated = (root / config.current().generated / "cpp").resolve()
    target = header.resolve()
    seen: set[Path] = set()
    stack = [source]
    while stack:
        f = stack.pop()
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            if f is source:
                return None
            continue
        for m in _INCLUDE.finditer(text):
            bases = (f.parent, generated) if m[1] == '"' else (generated,)
            for base in bases:
                candidate = (base / m[2]).resolve()
                if candidate.is_file():
                    if candidate == target:
                        return True
                    if candidate not in seen:
                        seen.add(candidate)
                        stack.append(candidate)
                    break
    return False


def _tight(text: str) -> str:
    """C++ declaration text with only the spaces that separate two words."""
    text = " ".join(text.split())
    return re.sub(r" ?([^\w ]) ?", r"\1", text)


def _split_params(params: str) -> list[str]:
    out, depth, start = [], 0, 0
    for i, c in enumerate(params):
        if c in "<([":
            depth += 1
        elif c in ">)]":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(params[start:i])
            start = i + 1
    if params.strip():
        out.append(params[start:])
    return out


# A declaration as the index gives it: `at::Tensor k(const at::Tensor& self, double factor);`.
_DECL = re.compile(r"^(.+?)\b(\w+)\((.*)\);$")


def same_declaration(compiler_decl: str, info: KernelInfo) -> bool:
    """Whether the declaration the compiler shows (`at::Tensor ns::k(const at::Tensor&, double)`)
    is the header's (`at::Tensor k(const at::Tensor& self, double factor);` in namespace ns),
    spelled the same way, parameter names aside."""
    m = _DECL.match(info.decl.strip())
    if m is None:
        return False
    types = [re.sub(r"\s*\b\w+\s*$", "", p) for p in _split_params(m.group(3))]
    expected = f"{m.group(1).strip()} {info.qualified}({', '.join(types)})"
    return _tight(expected) == _tight(compiler_decl)


def include_path(header: str) -> str:
    """How a kernel source includes generated header `header` (`-I <generated>/cpp`)."""
    return str(Path(header).relative_to(f"{config.current().generated}/cpp").as_posix())


def kernel_note(line: str, index: dict[str, list[KernelInfo]],
                root: Path | None = None) -> str | None:
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
    source = where.split(":")[0] if where else None
    if kind == "signature" and source and root is not None:
        missing = [info for info in infos
                   if includes(root / source, root / info.header, root) is False]
        if missing:
            return _include_note(prefix, qname, m.group("decl"), missing, source)
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


def _include_note(prefix: str, qname: str, decl: str, infos: list[KernelInfo],
                  source: str) -> str:
    """A kernel defined in a file that does not include the header declaring it: the header to
    include, and whether the definition already matches."""
    parts = []
    for info in infos:
        what = "; ".join(info.uses)
        if same_declaration(decl, info):
            parts.append(f"{prefix}'{qname}' is the {what}; the definition matches its "
                         f"declaration in {info.header}:{info.line}, but {source} does not "
                         "include that header")
        else:
            parts.append(f"{prefix}'{qname}' is the {what}, declared in {info.header}:"
                         f"{info.line}, which {source} does not include; for the schema\n"
                         f"    {info.schema}\n"
                         f"  the dispatcher calls it as\n    {info.decl}")
    headers = sorted({include_path(info.header) for info in infos})
    fix = " and ".join(f"#include <{h}>" for h in headers)
    then = ("" if all(same_declaration(decl, info) for info in infos) else
            "; then change the definition to match, or the schema in the op file")
    return "\n".join(parts) + f"\nhint: add `{fix}` to {source}, above the definition{then}"


# Kernel sources are compiled without Python's headers (Note [Toolchain]): the tutorials'
# `#include <torch/extension.h>` / `<Python.h>` and module-init blocks have no place in them.
_PYTHON_BLOCK = re.compile(r"\bPYBIND11_MODULE\s*\(|\bPyMODINIT_FUNC\b|\bPyInit_\w+")
_INCLUDED_FROM = re.compile(r"^(?:In file included from|\s+from) (\S+?):(\d+)[,:]$")


def python_header_note(line: str, chain: list[tuple[str, int]], root: Path,
                       stable: bool = False) -> str | None:
    """The note after `fatal error: Python.h: No such file or directory`, located at the kernel
    source's include (itself, or the torch header that pulls it in, as `chain` shows)."""
    m = _MISSING_HEADER.search(line)
    if m is None or m["header"].strip("<>\"'‘’") != "Python.h":
        return None
    source = chain[-1][0] if chain else m["file"]
    try:
        text = (root / source).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    if chain:
        # The include line: the column of its header name (as gcc shows), and the header.
        lineno = chain[-1][1]
        lines = text.splitlines()
        include = lines[lineno - 1] if 0 < lineno <= len(lines) else ""
        column = re.search(r"[<\"]", include)
        where = f"{source}:{lineno}:{column.start() + 1 if column else 1}"
        included = _INCLUDE.match(include)
        header = included[2] if included else "Python.h"
    else:
        where, header = m["where"], "Python.h"
    via = "" if header == "Python.h" else f" (<{header}> includes <Python.h>)"
    code = blank_comments_and_strings(text)
    blocks = [f"{b[0].rstrip('( ')} at {source}:{code.count(chr(10), 0, b.start()) + 1}"
              for b in _PYTHON_BLOCK.finditer(code)]
    block = (f"the module-init block ({', '.join(blocks)})" if blocks
             else "any PYBIND11_MODULE or PyInit_* block")
    instead = ("" if header == "Python.h" or stable else
               "; include <torch/all.h> or the ATen headers the kernels use instead")
    return (f"{where}: note: op libraries built by opgen do not link Python, so kernel sources "
            f"are compiled without Python's headers{via}\n"
            f"hint: remove the #include <{header}> and {block}: the generated TORCH_LIBRARY code "
            f"registers the ops, and importing the package loads the library{instead}; see "
            "docs/MIGRATION.md")


# What a call to an API the stable headers leave out (newer than the target version) looks like.
# Either the name is missing, or an older overload is the only candidate and the arguments do
# not fit it.
_UNDECLARED = re.compile(r"^(?P<where>(?P<file>\S+?):\d+:\d+): error: (?:no matching function "
                         r"for call to|.* is not a member of|.* was not declared in this scope|"
                         r".* has no member named|no member named|.* no type named|invalid "
                         r"(?:user-defined )?conversion|cannot convert|too (?:many|few) "
                         r"arguments to function)")


def min_torch_note(line: str, ns: str | None, stable: dict[str, str], root: Path,
                   noted: set[str]) -> str | None:
    """After an unknown-name or overload error in a source of a stable-ABI namespace (once per
    file): the namespace's min_torch hides what later torch versions added."""
    m = _UNDECLARED.search(line)
    if m is None or ns is None or ns not in stable or m["file"] in noted:
        return None
    noted.add(m["file"])
    minimum = stable[ns]
    where = ", ".join(min_torch_locations(root, ns)) or f"the op files of namespace '{ns}'"
    return (f"{m['where']}: note: namespace '{ns}' targets torch >= {minimum} (min_torch, "
            f"{where}): torch's stable headers leave out what later versions added, and a "
            "call to such an API fails like this\n"
            f"hint: if the API is newer than torch {minimum}, raise min_torch to the release "
            "that added it (the library then loads only on that torch and newer); otherwise "
            "fix the call")


def min_torch_locations(root: Path, ns: str) -> list[str]:
    """`file:line` of each `min_torch:` of the op files of stable namespace `ns`."""
    out = []
    for doc in namespace_indexes(root):
        if doc["namespace"] != ns:
            continue
        for source in doc["op_files"]:
            try:
                lines = (root / source).read_text(encoding="utf-8").splitlines()
            except OSError:
                out.append(source)
                continue
            at = next((i for i, t in enumerate(lines, 1) if t.startswith("min_torch:")), None)
            out.append(f"{source}:{at}" if at else source)
    return out


class Notes:
    """Reads the build's output line by line and says what to add after a line: the notes of
    this module (kernels, stable headers, Python headers, min_torch). The generated set and the
    kernel sources are read only once an error shows up."""

    def __init__(self, root: Path):
        self.root = root
        self.index: dict[str, list[KernelInfo]] | None = None
        self.stable: dict[str, str] = {}
        self.owner: dict[str, str] = {}       # kernel source -> its namespace
        self.chain: list[tuple[str, int]] = []
        self.noted: set[str] = set()

    def _load(self) -> None:
        self.index = kernel_index(self.root)
        self.stable = stable_namespaces(self.root)
        sources, _ = kernel_sources(config.current(), generated_namespaces(self.root), self.root)
        self.owner = {src: ns for ns, v in sources.items() for src, _ in v}

    def namespace(self, path: str) -> str | None:
        if path in self.owner:
            return self.owner[path]
        parts = Path(path).parts
        gen = Path(config.current().generated, "cpp").parts
        if parts[:len(gen)] == gen and len(parts) > len(gen) + 1:
            return parts[len(gen)]
        return None

    def after(self, line: str) -> str | None:
        line = line.rstrip("\n")
        m = _INCLUDED_FROM.match(line)
        if m:
            if line.startswith("In file"):
                self.chain = []
            self.chain.append((m[1], int(m[2])))
            return None
        chain, self.chain = self.chain, []
        if "error" not in line and "undefined reference" not in line:
            return None
        if self.index is None:
            self._load()
        assert self.index is not None
        source = chain[-1][0] if chain else line.split(":", 1)[0]
        ns = self.namespace(source)
        return (kernel_note(line, self.index, self.root)
                or python_header_note(line, chain, self.root, ns in self.stable)
                or stable_header_note(line, self.stable, ns)
                or min_torch_note(line, ns, self.stable, self.root, self.noted))


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
    sources, _ = kernel_sources(config.current(), generated_namespaces(root), root)
    return sorted(s for v in sources.values() for s, _ in v if s.endswith(".cu"))


def check_sources(root: Path) -> None:
    """UserError for kernel sources that would build and then go wrong at import (a hand-written
    TORCH_LIBRARY block for a namespace opgen generates, a TORCH_LIBRARY_IMPL registration of a
    kernel the generated registration units register too)."""
    namespaces = generated_namespaces(root)
    diags = Diagnostics()
    sources, _ = kernel_sources(config.current(), namespaces, root)
    check_kernel_sources(sources, set(namespaces), root, diags,
                         indexed_registrations(namespace_indexes(root)))
    diags.raise_if_errors()


def run_ninja(root: Path, extra: list[str], *, out=None) -> int:
    out = out or sys.stdout
    notes = Notes(root)
    proc = subprocess.Popen([ninja_binary(), "-f", ninja_file(config.current()), *extra],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", bufsize=1)
    assert proc.stdout is not None
    pending: str | None = None      # a note waits until the compiler has shown its source lines
    for line in proc.stdout:
        if pending is not None and not _SOURCE_EXCERPT.match(line):
            out.write(pending + "\n")
            pending = None
        out.write(line)
        note = notes.after(line)
        if note:
            if pending is not None:
                out.write(pending + "\n")
            pending = note
        out.flush()
    if pending is not None:
        out.write(pending + "\n")
    return proc.wait()


def _generate_hint() -> str:
    """How this project regenerates: its own command (`opgen generate` in a project)."""
    return f"hint: run `{config.current().codegen_command}`"


def check_generated(root: Path, out, err=None) -> bool:
    """Make ninja regenerate a generated set that is not the one its stamp records: without
    the stamp, an output of the `codegen` edge is missing, so that edge runs first. False when
    that cannot work (a build file older than the stamp), with the error written to `err`
    (stderr by default)."""
    err = err or sys.stderr
    project = config.current()
    stamp = set_stamp(project)
    problem = verify_stamp(root, stamp)
    if problem is None:
        return True
    build_file = ninja_file(project)
    if stamp not in (root / build_file).read_text(encoding="utf-8", errors="replace"):
        err.write(f"error: {problem}, and {build_file} is too old to regenerate it\n"
                  f"{_generate_hint()}\n")
        return False
    out.write(f"note: {problem}; regenerating before the build\n")
    try:
        (root / stamp).unlink()
    except FileNotFoundError:
        pass
    return True


def build(root: Path, extra: list[str] | None = None, *, out=None, err=None) -> int:
    """Build; ninja's output and notes go to `out` (stdout), errors that stop the build before
    ninja runs to `err` (stderr)."""
    out = out or sys.stdout
    err = err or sys.stderr
    build_file = ninja_file(config.current())
    if not (root / build_file).is_file():
        err.write(f"error: {build_file} not found under {root}: nothing is generated yet\n"
                  f"{_generate_hint()} first\n")
        return 1
    if not check_generated(root, out, err):
        return 1
    try:
        check_sources(root)
    except UserError as e:
        err.write(e.diags.render() + "\n")
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
    cli.project_option(parser)
    add_arguments(parser)
    cli.debug_option(parser, False)
    args = parser.parse_args(argv)
    return run(args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The build's own options (also those of `opgen build`)."""
    parser.add_argument("-j", "--jobs", type=int, help="parallel jobs (ninja's default otherwise)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show full command lines")
    parser.add_argument("targets", nargs="*", help="ninja targets (default: every library)")


def run(args: argparse.Namespace) -> int:
    extra = (["-j", str(args.jobs)] if args.jobs else []) + (["-v"] if args.verbose else [])
    # OSError: the disk, not the code (a build directory that cannot be written, no compiler).
    return cli.run_in_project(args, lambda project: build(project.root, extra + args.targets),
                              environment_errors=(OSError,))


if __name__ == "__main__":
    sys.exit(main())
