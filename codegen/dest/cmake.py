"""Op library IR + kernel sources -> `<generated>/opgen.cmake`, for projects that build with CMake
(scikit-build-core, or a CMakeLists.txt of their own). Written by `opgen generate` when
`[tool.opgen] cmake = true` (docs/CMAKE.md).

A project's CMakeLists.txt includes the file; it defines, per namespace, a target `opgen_<ns>`
building `lib<ns>_ops.so` (the name the generated loader looks for) from the namespace's kernel
sources and generated registrations, and installs it where the loader finds it in the installed
package. Flags come from torch's own CMake package (`find_package(Torch)`, what CMake users of
libtorch do) for full-ABI namespaces; a stable-ABI namespace sees only torch's stable headers
(the same links as Note [Stable include root] in codegen/toolchain.py), is compiled for its
min_torch, and links libtorch_cpu alone: no libtorch_python, no Python.

Regeneration happens at configure time: the file runs `opgen generate` when CMake includes it,
then includes itself again as generation left it, and names the op files, pyproject.toml and
the files of the op-file and kernel directories as configure dependencies (globs CMake checks
before each build), so editing an op file (or adding a kernel source) makes the next build
reconfigure, regenerate and recompile what changed. Generation
writes only changed files, so nothing else recompiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from codegen import config
from codegen.config import KERNEL_SUFFIXES
from codegen import layout as L
from codegen.abi import namespace_abi
from codegen.diagnostics import Diagnostics
from codegen.dest import cpp_aoti, cpp_autograd, ninja
from codegen.model import OpLibrary
from codegen.rendering import banner

FILE_NAME = "opgen.cmake"


@dataclass(frozen=True)
class Namespace:
    name: str
    library: str                       # lib<ns>_ops.so
    kernel_sources: tuple[str, ...]    # .cpp/.cc
    cuda_sources: tuple[str, ...]      # .cu
    generated_sources: tuple[str, ...]  # registrations, C++ autograd, AOTI shims, the stamp
    stable_target: str | None          # TORCH_TARGET_VERSION of a stable namespace


def cmake_path(project: config.Project) -> str:
    return f"{project.generated}/{FILE_NAME}"


def _quote(text: str) -> str:
    """A CMake quoted argument."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") \
        .replace(";", "\\;") + '"'


def _root_relative(path: str) -> str:
    """A project-relative path (user text, escaped) below the project root."""
    return '"${OPGEN_PROJECT_ROOT}' + ("" if path == "." else "/" + _quote(path)[1:-1]) + '"'


def install_dir(project: config.Project) -> str | None:
    """Where the libraries go in the installed package (relative to site-packages), or None
    when `libraries` lies outside the package."""
    libs, pkg = PurePosixPath(project.libraries), PurePosixPath(project.package_dir)
    if libs.parts[:len(pkg.parts)] != pkg.parts:
        return None
    rel = libs.relative_to(pkg)
    return PurePosixPath(project.package.replace(".", "/"), rel).as_posix()


def _glob(directory: str, suffix: str) -> str:
    """A CMake glob (quoted argument) of the non-hidden files ending in `suffix` of `directory`,
    a project-relative path; the project root and `directory` are escaped for a glob, so that
    their own `*?[]` match themselves."""
    escaped = "".join(f"[{c}]" if c in "*?[]" else c for c in directory)
    below = "" if directory == "." else _quote(escaped)[1:-1] + "/"
    return f'"${{_opgen_glob_root}}/{below}[!.]*{suffix}"'


def render(project: config.Project, namespaces: list[Namespace], op_files: list[str],
           kernel_dirs: list[str], banner: str, stable_headers: tuple[str, ...]) -> str:
    up = "/".join(".." for _ in PurePosixPath(project.generated).parts)
    generated_cpp = f"{project.generated}/cpp"
    dest = install_dir(project)
    out: list[str] = [banner.rstrip("\n"), ""]
    w = out.append
    w("# Include from the project's CMakeLists.txt (docs/CMAKE.md):")
    w(f"#   include(${{CMAKE_CURRENT_SOURCE_DIR}}/{project.generated}/{FILE_NAME})")
    w("# Targets: " + ", ".join(f"opgen_{ns.name} ({ns.library})" for ns in namespaces) + ".")
    w("# Options: OPGEN_PYTHON (the interpreter that runs opgen and has torch; default:")
    w("# Python_EXECUTABLE, else the one find_package(Python) finds), OPGEN_GENERATED (true: the")
    w("# includer has just run `opgen generate`, do not run it again).")
    w("if(CMAKE_VERSION VERSION_LESS 3.19)")
    w('  message(FATAL_ERROR "opgen.cmake needs CMake 3.19 or newer")')
    w("endif()")
    w(f'get_filename_component(OPGEN_PROJECT_ROOT "${{CMAKE_CURRENT_LIST_DIR}}/{up}" ABSOLUTE)')
    w("if(NOT OPGEN_PYTHON)")
    w("  if(NOT Python_EXECUTABLE)")
    w("    find_package(Python REQUIRED COMPONENTS Interpreter)")
    w("  endif()")
    w('  set(OPGEN_PYTHON "${Python_EXECUTABLE}")')
    w("endif()")
    w("")
    w("# Regenerate, then read this file again as generation left it (its lists may have changed).")
    w("if(NOT OPGEN_GENERATED)")
    w("  set(OPGEN_GENERATED TRUE)")
    w('  execute_process(COMMAND "${OPGEN_PYTHON}" -m codegen --project "${OPGEN_PROJECT_ROOT}" '
      "generate")
    w('                  WORKING_DIRECTORY "${OPGEN_PROJECT_ROOT}" RESULT_VARIABLE _opgen_status)')
    w("  if(NOT _opgen_status EQUAL 0)")
    w('    message(FATAL_ERROR "opgen generate failed (${_opgen_status}); its messages are above")')
    w("  endif()")
    w('  include("${CMAKE_CURRENT_LIST_FILE}")')
    w("  return()")
    w("endif()")
    w("set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS")
    deps = [*op_files, *([project.config_path] if project.config_path else [])]
    for d in deps:
        w(f"  {_root_relative(d)}")
    w(")")
    # Not the directories (Note [Input listing] in codegen/dest/ninja.py): the set of files in
    # them. CMake globs them again before each build and reconfigures only when the set
    # changed, so an editor's save through a renamed temporary reconfigures nothing.
    op_dirs = sorted({str(PurePosixPath(f).parent) for f in op_files})
    if op_dirs or kernel_dirs:
        w("# An op file added, or a kernel source added or removed, reconfigures (and regenerates).")
        w("# Hidden files are left out: editors' lock and backup files come and go.")
        w('string(REGEX REPLACE "([][*?])" "[\\\\1]" _opgen_glob_root "${OPGEN_PROJECT_ROOT}")')
    if op_dirs:
        w("file(GLOB _opgen_op_files LIST_DIRECTORIES false CONFIGURE_DEPENDS")
        for d in op_dirs:
            w(f"  {_glob(d, '.yaml')}")
        w(")")
    if kernel_dirs:
        w("file(GLOB_RECURSE _opgen_kernel_files LIST_DIRECTORIES false CONFIGURE_DEPENDS")
        for d in kernel_dirs:
            for suffix in KERNEL_SUFFIXES:
                w(f"  {_glob(d, suffix)}")
        w(")")
    w("")
    w("# torch: its CMake package, and the exact version the loader checks against the stamp.")
    w("if(NOT OPGEN_TORCH_VERSION)")
    w('  execute_process(COMMAND "${OPGEN_PYTHON}" -c')
    w('    "import torch, torch.utils; print(torch.__version__); '
      'print(torch.utils.cmake_prefix_path); print(int(torch.version.cuda is not None))"')
    w("    OUTPUT_VARIABLE _opgen_torch OUTPUT_STRIP_TRAILING_WHITESPACE "
      "COMMAND_ERROR_IS_FATAL ANY)")
    w('  string(REPLACE "\\n" ";" _opgen_torch "${_opgen_torch}")')
    w("  list(GET _opgen_torch 0 OPGEN_TORCH_VERSION)")
    w("  list(GET _opgen_torch 1 _opgen_torch_prefix)")
    w("  list(GET _opgen_torch 2 OPGEN_TORCH_CUDA)")
    w('  list(APPEND CMAKE_PREFIX_PATH "${_opgen_torch_prefix}")')
    w("endif()")
    w("if(NOT TARGET torch)")
    w("  find_package(Torch REQUIRED)")
    w("endif()")
    w("get_target_property(_opgen_cxx_standard torch CXX_STANDARD)")
    w("if(NOT _opgen_cxx_standard)")
    w("  set(_opgen_cxx_standard 17)")
    w("endif()")
    w("")
    if any(ns.cuda_sources for ns in namespaces):
        w("# CUDA kernels compile when torch has CUDA; otherwise they are left out, as `opgen")
        w("# build` does.")
        w("if(OPGEN_TORCH_CUDA)")
        w("  enable_language(CUDA)")
        w("endif()")
        w("")
    if any(ns.stable_target for ns in namespaces):
        w("# Note [Stable include root] (codegen/toolchain.py): a stable-ABI namespace sees "
          "torch's stable")
        w("# headers only, through links in the build tree.")
        w('set(OPGEN_STABLE_INCLUDE "${CMAKE_CURRENT_BINARY_DIR}/opgen-stable-include")')
        w("foreach(_opgen_rel")
        for h in stable_headers:
            w(f"    {_quote(h)}")
        w("  )")
        w('  if(NOT EXISTS "${OPGEN_STABLE_INCLUDE}/${_opgen_rel}")')
        w('    get_filename_component(_opgen_dir "${OPGEN_STABLE_INCLUDE}/${_opgen_rel}" '
          "DIRECTORY)")
        w('    file(MAKE_DIRECTORY "${_opgen_dir}")')
        w('    file(CREATE_LINK "${TORCH_INSTALL_PREFIX}/include/${_opgen_rel}"')
        w('         "${OPGEN_STABLE_INCLUDE}/${_opgen_rel}" SYMBOLIC)')
        w("  endif()")
        w("endforeach()")
        w('find_library(OPGEN_TORCH_CPU_LIBRARY torch_cpu PATHS "${TORCH_INSTALL_PREFIX}/lib" '
          "NO_DEFAULT_PATH REQUIRED)")
        w("")
    for ns in namespaces:
        t = f"opgen_{ns.name}"
        abi = "full libtorch API" if ns.stable_target is None else "stable ABI"
        w(f"# namespace {ns.name} ({abi})")
        w(f"add_library({t} SHARED")      # SHARED, not MODULE: a C++ program may link it
        for s in (*ns.kernel_sources, *ns.generated_sources):
            w(f"  {_root_relative(s)}")
        w(")")
        if ns.cuda_sources:
            w("if(OPGEN_TORCH_CUDA)")
            w(f"  target_sources({t} PRIVATE")
            for s in ns.cuda_sources:
                w(f"    {_root_relative(s)}")
            w("  )")
            if ns.stable_target is None:
                w(f"  target_compile_definitions({t} PRIVATE OPGEN_WITH_CUDA)")
            w("else()")
            w(f'  message(STATUS "opgen: torch ${{OPGEN_TORCH_VERSION}} has no CUDA: '
              f'the CUDA kernels of {ns.name} are left out")')
            w("endif()")
        stem = ns.library.removeprefix("lib").removesuffix(".so")
        w(f'set_target_properties({t} PROPERTIES PREFIX "lib" OUTPUT_NAME {_quote(stem)} '
          'SUFFIX ".so"')
        w("  CXX_STANDARD ${_opgen_cxx_standard} CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF")
        w("  POSITION_INDEPENDENT_CODE ON INSTALL_RPATH \"\")")
        w(f"target_include_directories({t} PUBLIC {_root_relative(generated_cpp)})")
        w(f'target_compile_definitions({t} PRIVATE "OPGEN_TORCH_VERSION=\\"${{OPGEN_TORCH_VERSION}}\\"")')
        if ns.kernel_sources:
            w("# A kernel defined with the wrong signature is an error (codegen/dest/cpp_kernels.py).")
            w("set_source_files_properties(")
            for s in ns.kernel_sources:
                w(f"  {_root_relative(s)}")
            w("  PROPERTIES COMPILE_OPTIONS -Werror=missing-declarations)")
        if ns.stable_target is None:
            w(f"target_link_libraries({t} PUBLIC ${{TORCH_LIBRARIES}})")
        else:
            w(f'target_include_directories({t} SYSTEM PRIVATE "${{OPGEN_STABLE_INCLUDE}}")')
            w(f"target_compile_definitions({t} PRIVATE TORCH_TARGET_VERSION={ns.stable_target})")
            w(f"target_compile_options({t} PRIVATE -fvisibility=hidden)")
            w(f'target_link_libraries({t} PRIVATE "${{OPGEN_TORCH_CPU_LIBRARY}}")')
        w(f"target_link_options({t} PRIVATE -Wl,--no-undefined)")
        if dest is not None:
            w(f"install(TARGETS {t} LIBRARY DESTINATION {_quote(dest)})")
        else:
            w(f"# [tool.opgen] libraries = {project.libraries} is outside the package: "
              "no install rule.")
        w("")
    return "\n".join(out).rstrip("\n") + "\n"


def generate(lib: OpLibrary, diags: Diagnostics, project: config.Project) -> dict[str, str]:
    """{<generated>/opgen.cmake: text} when the project asks for it, else nothing."""
    if not project.cmake:
        return {}
    sources = ninja.kernel_sources(project, list(lib.namespaces))
    namespaces = []
    for ns, shs in L.shards(lib).items():
        a = namespace_abi(lib, ns)
        files = [s for s, _ in sources.get(ns, ())]
        namespaces.append(Namespace(
            ns, L.library_file(ns), tuple(f for f in files if not f.endswith(".cu")),
            tuple(f for f in files if f.endswith(".cu")),
            (*(s.registration(project) for s in shs),
             *(p for p in (cpp_autograd.paths(lib, project).get(ns),
                           cpp_aoti.paths(lib, project).get(ns)) if p),
             L.stamp_path(project, ns)),
            None if a is None else a.target_version))
    op_files = sorted({f.path for f in lib.files})
    return {cmake_path(project): render(project, namespaces, op_files, list(project.kernels),
                                        banner("#", op_files), L.STABLE_HEADERS)}
