"""This machine's toolchain for the build: `build/toolchain.ninja`, from torch.utils.cpp_extension.

Note [Toolchain]
`generated/build.ninja` is committed and identical everywhere; what differs per machine (compiler,
ccache, torch's include and library paths, the C++ standard and ABI torch was built with, OpenMP,
CUDA) goes into `build/toolchain.ninja`, taken from `torch.utils.cpp_extension`. Importing torch
costs most of a second, so the file starts with a key digesting everything it was derived from
(this module, the interpreter, torch's version file and library, the environment variables that
pick compilers); while the key matches, torch is not imported and the file is not rewritten, and a
build with nothing to do finishes in a few milliseconds of ninja.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from codegen import config
from codegen import layout as L
from codegen.abi import version_text
from codegen.dest.ninja import ninja_file, toolchain_file
from codegen.diagnostics import Diagnostics
from codegen.files import write_atomic

KEY_PREFIX = "# key: "
# The oldest torch the generated code is tested to build and run with (the package's dependency
# says the same; tests/test_project.py holds them together). torch 2.10 does not compile its
# registrations (`m.def(schema, {tags})`); 2.5 also lacks AOTInductor's shims it calls and
# torch.library.register_autocast.
MIN_TORCH = (2, 13)
_ENV_KEYS = ("CXX", "CC", "CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST", "OPGEN_CFLAGS",
             "OPGEN_NVCC_FLAGS", "OPGEN_NO_CCACHE")


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
    if arch == "native" and torch.cuda.device_count() == 0:
        # torch reads `native` from the visible GPUs, and fails on an empty list with IndexError
        raise ToolchainError(_arch_error(
            "'native' compiles for the GPUs of the building machine, and it has none visible",
            arch, origin, project,
            "name the architectures to build for, e.g. \"8.0;9.0+PTX\""))
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


def _arch_error(reason: str, arch: str, origin: str, project: config.Project,
                hint: str = "write architectures as torch.utils.cpp_extension takes them: "
                            "versions such as \"8.0;8.6;9.0+PTX\" or names such as "
                            "\"Ampere;Hopper\"") -> str:
    if origin.startswith("[tool.opgen]") and project.config_path is not None:
        diags = Diagnostics()
        loc = config.locate_value(project, "cuda-arch", diags)
        diags.error(loc, f"invalid CUDA architecture list '{arch}': {reason}", hint)
        return diags.render()
    return f"error: invalid CUDA architecture list from {origin}: {reason}\nhint: {hint}"


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


# Where torch.utils.cpp_extension looks last, and where CUDA's installers put the toolkit.
DEFAULT_TOOLKIT = Path("/usr/local/cuda")


def _is_toolkit(home: str | Path) -> bool:
    return (Path(home) / "include" / "cuda_runtime.h").is_file()


def _toolkit_home(found: str | None) -> str | None:
    """The CUDA toolkit to build with. torch.utils.cpp_extension takes CUDA_HOME (CUDA_PATH), else
    the directory above the `bin/` of the first nvcc on PATH, else /usr/local/cuda; an nvcc that
    is a wrapper script (`/usr/local/bin/nvcc` exec'ing the real one) makes that `/usr/local`,
    where no libcudart is, and every link fails. A guess that is no toolkit gives way to the
    real nvcc's toolkit, then /usr/local/cuda; a CUDA_HOME the user set stays as it is."""
    if found is None or _is_toolkit(found) or \
            os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
        return found
    return installed_toolkit()


def installed_toolkit() -> str | None:
    """The CUDA toolkit of the first nvcc on PATH (through links), else DEFAULT_TOOLKIT; None
    where neither is one."""
    nvcc = shutil.which("nvcc")
    candidates = [Path(nvcc).resolve().parent.parent] if nvcc else []
    candidates.append(DEFAULT_TOOLKIT)
    return next((str(c) for c in candidates if _is_toolkit(c) and (c / "bin" / "nvcc").exists()),
                None)


def make_toolchain(key: str) -> Toolchain:
    """Derive the toolchain from torch.utils.cpp_extension (imports torch)."""
    import torch
    from packaging.version import Version
    from torch.utils import cpp_extension

    torch_version = torch.__version__
    if Version(torch_version).release[:2] < MIN_TORCH:
        floor = version_text(MIN_TORCH)
        raise ToolchainError(
            f"error: torch {torch_version} is older than opgen supports: the generated code "
            f"needs torch {floor} or newer\n"
            f"hint: pip install 'torch>={floor}' (the build uses the torch of {sys.executable})")
    # The C++ standard cpp_extension compiles extensions with (C++20 since torch 2.10ish).
    ext_source = Path(cpp_extension.__file__).read_text(encoding="utf-8")
    std = "c++20" if "-std=c++20" in ext_source else "c++17"
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    openmp = torch.backends.openmp.is_available()
    torch_cuda = torch.version.cuda is not None
    if torch_cuda:
        cpp_extension.CUDA_HOME = _toolkit_home(cpp_extension.CUDA_HOME)
    with_cuda = torch_cuda and cpp_extension.CUDA_HOME is not None
    includes = cpp_extension.include_paths("cuda" if with_cuda else "cpu")
    lib_dirs = cpp_extension.library_paths("cuda" if with_cuda else "cpu")

    cxx = shlex.split(os.environ.get("CXX", "c++"))
    if not cxx or shutil.which(cxx[0]) is None:
        # Else every compile fails alike with `/bin/sh: 1: ...: not found`.
        given = "CXX" in os.environ
        what = ("CXX is empty" if not cxx else f"the C++ compiler '{cxx[0]}' "
                f"({'CXX' if given else 'c++, the default'}) is not found")
        raise ToolchainError(
            f"error: {what}\n"
            f"hint: {'set CXX to an installed compiler' if given else 'install g++'} that "
            f"builds C++20, as torch {torch_version} extensions need, or add its directory to "
            "PATH")
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
        # A kernel takes every argument of its schema, and many ignore some (FlashAttention's
        # sm_margin): -Wextra's unused-parameter would warn for each, on every build.
        "kernel_cflags = -Werror=missing-declarations -Wno-unused-parameter",
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
# namespace fails with "No such file or directory", and codegen.build_notes explains why.
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
