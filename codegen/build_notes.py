"""Notes the build adds after compiler and linker errors, read from ninja's output line by line.

A kernel defined with the wrong signature (caught by -Werror=missing-declarations, see
codegen/dest/cpp_kernels.py) or never defined (caught at link time by -Wl,--no-undefined) is named
together with its op, the schema's location, and the exact declaration it must have; so is one
defined 'static', outside its namespace, or in two kernel sources. A kernel
source that includes Python's headers, a header outside torch's stable ABI in a stable namespace,
or an API newer than the namespace's min_torch gets a note and a hint too. What the notes know of
the generated set comes from `generated/cpp/<ns>/index.json` (codegen.dest.cpp_kernel_index).
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from codegen import config
from codegen.dest.ninja import blank_comments_and_strings, kernel_sources


@dataclass(frozen=True)
class KernelInfo:
    qualified: str            # exops::scaled_add_cpu
    uses: tuple[str, ...]     # "CPU kernel of exops::scaled_add (schemas/core.yaml:9)"
    schema: str
    decl: str
    header: str
    line: int
    namespace: str = ""       # the op namespace whose library registers (and links) it


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


def generated_namespaces(root: Path) -> list[str]:
    """The namespaces of the generated set (one directory each under <generated>/cpp)."""
    base = root / config.current().generated / "cpp"
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def kernel_index(root: Path,
                 indexes: list[dict] | None = None) -> dict[str, list[KernelInfo]]:
    """Kernel name -> its declarations (from `indexes`, else namespace_indexes)."""
    out: dict[str, list[KernelInfo]] = {}
    for doc in namespace_indexes(root) if indexes is None else indexes:
        for r in doc["kernels"]:
            info = KernelInfo(r["kernel"], tuple(_located(root, r["source"], u) for u in r["uses"]),
                              r["schema"], r["decl"], r["header"], r["line"], doc["namespace"])
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
_STATIC = re.compile(r"^(?P<where>\S+:\d+:\d+): error: [‘'`](?P<decl>.+?)[’'] was declared "
                     r"[‘'`]extern[’'] and later [‘'`]static[’']")
_DUPLICATE = re.compile(r"multiple definition of [‘'`](?P<decl>.+?)[’']")
_QNAME = re.compile(r"([\w:]+)\(")


def _qualified_name(decl: str) -> str | None:
    m = _QNAME.search(decl)
    return m.group(1).lstrip(":") if m else None


_MISSING_HEADER = re.compile(r"^(?P<where>(?P<file>\S+?):\d+:\d+): fatal error: (?P<header>\S+): "
                             r"No such file or directory")


def _missing_header(line: str) -> tuple[re.Match, str] | None:
    """A missing-header error's match and the header it names, without its quotes."""
    m = _MISSING_HEADER.search(line)
    return None if m is None else (m, m["header"].strip("<>\"'‘’"))


def stable_namespaces(root: Path, indexes: list[dict] | None = None) -> dict[str, str]:
    """namespace -> min_torch of the stable-ABI namespaces (from `indexes`, else
    namespace_indexes)."""
    return {d["namespace"]: d["min_torch"]
            for d in (namespace_indexes(root) if indexes is None else indexes)
            if d["abi"] == "stable"}


def stable_header_note(line: str, stable: dict[str, str], ns: str | None = None) -> str | None:
    """The note after a missing-header error in a source of a stable-ABI namespace (`ns`, the
    namespace of the source; else guessed from a `csrc/<ns>/` or `cpp/<ns>/` in its path)."""
    missing = _missing_header(line)
    if missing is None:
        return None
    m, header = missing
    if ns is None:
        parts = Path(m["file"]).parts
        ns = next((parts[i + 1] for i in range(len(parts) - 1)
                   if parts[i] in ("csrc", "cpp") and parts[i + 1] in stable), None)
    if ns is None or ns not in stable:
        return None
    return (f"{m['where']}: note: <{header}> is not part of torch's stable ABI; namespace '{ns}' "
            f"is built with 'abi: stable' (torch >= {stable[ns]}), so its sources see only "
            "torch/csrc/stable/* and torch/headeronly/* (no ATen, c10, torch/extension.h or "
            "Python.h)\nhint: use the stable API (torch::stable::Tensor, torch/csrc/stable/ops.h, "
            "torch/headeronly/...), or build the namespace on the full API (remove 'abi: stable' "
            "and 'min_torch' from its op files); see docs/STABLE_ABI.md")


def generated_header_note(line: str, root: Path, indexes: list[dict] | None = None,
                          owner: dict[str, str] | None = None) -> str | None:
    """The note after a missing-header error naming a header of a generated namespace
    (`<ns>/...`) that generation does not write: an op file renamed (its header is named after
    it) or an op renamed or removed. The headers there are named instead (with their op files,
    from `indexes`, else namespace_indexes). For a namespace opgen generates nothing for, see
    _unknown_namespace (`owner`: kernel source -> the namespace it is compiled into)."""
    missing = _missing_header(line)
    if missing is None:
        return None
    m, header = missing
    ns, _, rest = header.partition("/")
    cpp = root / config.current().generated / "cpp"
    if not rest or (cpp / header).is_file():
        return None
    if not (cpp / ns).is_dir():
        return _unknown_namespace(m, header, ns, owner or {})
    if indexes is None:
        indexes = namespace_indexes(root)
    doc = next((d for d in indexes if d["namespace"] == ns), None)
    sources = {Path(f).stem: f for f in (doc or {}).get("op_files", [])}
    files = sorted(p.stem for p in (cpp / ns).glob("*.h"))
    if not files:
        return None
    have = ", ".join(f"<{ns}/{stem}.h>" + (f" ({sources[stem]})" if stem in sources else "")
                     for stem in files)
    op = PurePosixPath(rest)
    near = ([f"{ns}/{p.parent.name}/{p.name}" for p in sorted((cpp / ns).glob(f"*/{op.name}"))]
            if len(op.parts) == 2 else [])
    hint = (f"did you mean <{near[0]}>?" if near else
            f"include <{ns}/{files[0]}.h>" if len(files) == 1 else
            "include the header of the op file that declares the kernels")
    return (f"{m['where']}: note: <{header}> is not a header opgen generates: namespace '{ns}' "
            f"has {have}; each op file's header is named after the file, each op's after the "
            f"op (<{ns}/<op file>/<op>.h>)\nhint: {hint}")


def _unknown_namespace(m: re.Match, header: str, ns: str, owner: dict[str, str]) -> str | None:
    """`<ns/...>` where opgen generates no namespace `ns`, included by a source in a kernel
    directory's `ns/`: a library with one namespace compiles every kernel source into it, so a
    directory left from a namespace without ops (deleted, or with an empty `ops:`) joins that
    library, and its generated headers are missing."""
    source = m["file"]
    into = owner.get(source)
    if into is None or ns == into:
        return None
    kdir = next((d for d in config.current().kernels if source.startswith(f"{d}/{ns}/")), None)
    if kdir is None:
        return None
    return (f"{m['where']}: note: <{header}> would be a header of namespace '{ns}', which has no "
            f"ops, so opgen generates none; {source} lies in {kdir}/{ns}/ and is compiled into "
            f"namespace '{into}', the library's only one\n"
            f"hint: delete {kdir}/{ns}/ if namespace '{ns}' is gone, or give it ops in an op file")


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
    return _torch_names(_tight(expected)) == _torch_names(_tight(compiler_decl))


# at:: re-exports c10's types by using-declarations, so gcc names the header's `at::ScalarType`
# (also Scalar, Layout, Device, MemoryFormat) by its home, `c10::ScalarType`.
_TORCH_SCOPE = re.compile(r"(?<![\w:])(?:at|c10)::")


def _torch_names(text: str) -> str:
    return _TORCH_SCOPE.sub("", text)


def include_path(header: str) -> str:
    """How a kernel source includes generated header `header` (`-I <generated>/cpp`)."""
    return str(Path(header).relative_to(f"{config.current().generated}/cpp").as_posix())


# Names followed by `(` that are no function definition's.
_NOT_FUNCTIONS = frozenset({"if", "for", "while", "switch", "catch", "return", "sizeof",
                            "alignof", "decltype", "noexcept", "static_assert", "requires",
                            "operator", "defined", "alignas", "throw"})
_NAME_PAREN = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
# What may stand between a definition's `)` and its body.
_BODY = re.compile(r"\s*(?:(?:const|volatile|noexcept|override|final|&&|&)\b\s*|"
                   r"&&?\s*|->\s*[\w:<>,\s*&]+?)*\{")
_DIRECTIVE = re.compile(r"^[ \t]*#.*$", re.M)


def defined_functions(text: str) -> list[tuple[str, int]]:
    """(name, line) of each function the C++ source `text` defines (a name, its parameter
    list, then a body), read from the text without a compiler; macros (all-capitals names,
    such as TORCH_LIBRARY_IMPL blocks) and preprocessor lines are not functions."""
    code = _DIRECTIVE.sub(lambda m: " " * len(m[0]), blank_comments_and_strings(text))
    out = []
    for m in _NAME_PAREN.finditer(code):
        name = m[1]
        if name in _NOT_FUNCTIONS or name.upper() == name:
            continue
        depth, i = 0, m.end() - 1
        for i in range(m.end() - 1, len(code)):
            if code[i] == "(":
                depth += 1
            elif code[i] == ")":
                depth -= 1
                if not depth:
                    break
        if depth or not _BODY.match(code, i + 1):
            continue
        out.append((name, code.count("\n", 0, m.start()) + 1))
    return out


def source_functions(root: Path, sources: list[str]) -> dict[str, list[str]]:
    """Function name -> `source:line` of each definition in the kernel sources `sources`."""
    out: dict[str, list[str]] = {}
    for source in sources:
        try:
            text = (root / source).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for name, line in defined_functions(text):
            out.setdefault(name, []).append(f"{source}:{line}")
    return out


def _unqualified(qname: str) -> str:
    return qname.rpartition("::")[2]


def _uses(infos: list[KernelInfo]) -> str:
    """What the kernels of `infos` are ("CPU kernel of ns::op (file:line); ...")."""
    return "; ".join(u for info in infos for u in info.uses)


def _scope_text(qname: str) -> str:
    """Where C++ name `qname` is declared, in words."""
    scope = qname.rpartition("::")[0]
    return f"in namespace '{scope}'" if scope else "at global scope"


def _misspelled_kernel(qname: str, index: dict[str, list[KernelInfo]],
                       defined: dict[str, list[str]]) -> tuple[str, list[KernelInfo]] | None:
    """The kernel of the op files that function `qname` (not one of them) is likely meant to
    be: a kernel of the same C++ namespace, with a close name, that no kernel source defines."""
    scope = qname.rpartition("::")[0]
    candidates = {_unqualified(k): k for k in index
                  if k.rpartition("::")[0] == scope and _unqualified(k) not in defined}
    match = difflib.get_close_matches(_unqualified(qname), list(candidates), n=1, cutoff=0.6)
    return (candidates[match[0]], index[candidates[match[0]]]) if match else None


def kernel_note(line: str, index: dict[str, list[KernelInfo]],
                root: Path | None = None,
                defined: dict[str, list[str]] | None = None,
                owner: dict[str, str] | None = None) -> str | None:
    """The note to print after a compiler/linker error line about a kernel, if it is one.
    `defined` (function name -> where the kernel sources define one, source_functions) names
    the likely meant kernel of a misspelled one; `owner` (kernel source -> the namespace whose
    library it is compiled into) tells a definition built into another namespace's library."""
    defined = defined or {}
    owner = owner or {}
    for pattern, kind in ((_MISSING_DECL, "signature"), (_AMBIGUATING, "signature"),
                          (_UNDEFINED, "undefined"), (_DUPLICATE, "duplicate"),
                          (_STATIC, "static")):
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
    if kind == "duplicate":
        places = defined.get(_unqualified(qname), [])
        if not infos and len(places) < 2:
            return None     # a helper the kernel sources do not define twice (a header's)
        return _duplicate_note(qname, infos or [], places)
    if kind == "static":
        if not infos:
            return None
        return (f"{prefix}'{qname}' is the {_uses(infos)}: the generated registration calls "
                "it from another file, so it cannot be 'static'\n"
                "hint: remove 'static' (only helpers, functions that are not kernels, need it)")
    if not infos:
        if kind == "undefined":
            return None
        elsewhere = sorted(k for k in index if _unqualified(k) == _unqualified(qname))
        if elsewhere:
            # The kernel's own name in another namespace: a definition outside the namespace
            # block (or in another one) declares a new function rather than the kernel.
            scopes = " or ".join(f"`namespace {k.rpartition('::')[0]} {{ ... }}`"
                                 for k in elsewhere)
            what = _uses([info for k in elsewhere for info in index[k]])
            names = " and ".join(f"'{k}'" for k in elsewhere)
            return (f"{prefix}'{qname}' is not a kernel named in the op files; {names} "
                    f"{'is' if len(elsewhere) == 1 else 'are'} (the {what}), but this "
                    f"definition is {_scope_text(qname)}\n"
                    f"hint: define it inside {scopes}, where its header declares it")
        meant = _misspelled_kernel(qname, index, defined)
        if meant is not None:
            kernel, meant_infos = meant
            return (f"{prefix}'{qname}' is not a kernel named in the op files; '{kernel}' is "
                    f"(the {_uses(meant_infos)}), and no kernel source defines it\n"
                    f"hint: did you mean '{_unqualified(kernel)}'? rename the function or the "
                    "kernel in the op file's `dispatch:` so that the two match")
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
    if kind == "undefined":
        for info in infos:
            parts.append(f"{prefix}'{qname}' is the {'; '.join(info.uses)}, declared in "
                         f"{info.header}:{info.line} but defined by no kernel source; define "
                         f"it as\n    {info.decl}\n  in a kernel source under {_kernel_dirs()}")
        name, scope = _unqualified(qname), qname.rpartition("::")[0]
        needed = {info.namespace for info in infos}
        # A definition in another namespace's kernel directory is compiled into that library,
        # out of this one's linker's reach, however right the function itself is.
        astray = [(place, owner[place.rpartition(":")[0]]) for place in defined.get(name, [])
                  if owner.get(place.rpartition(":")[0]) not in (None, *needed)]
        if astray and len(needed) == 1:
            ns = next(iter(needed))
            parts.append(f"hint: {', '.join(p for p, _ in astray)} defines a function named "
                         f"'{name}', but in a kernel source of namespace '{astray[0][1]}' (a "
                         "directory named after it), compiled into that namespace's library; "
                         f"move the definition to a kernel source in a directory named '{ns}', "
                         f"{_scope_text(qname)}")
        elif name in defined:
            parts.append(f"hint: {', '.join(defined[name])} defines a function named '{name}', "
                         f"but not this one: check that it is {_scope_text(qname)}, neither "
                         "'static' nor in an anonymous namespace, and has the parameters above")
        else:
            kernels = {_unqualified(k) for k in index if k.rpartition("::")[0] == scope}
            close = difflib.get_close_matches(name, [f for f in defined if f not in kernels],
                                              n=1, cutoff=0.6)
            if close:
                parts.append(f"hint: did you mean '{close[0]}' ({', '.join(defined[close[0]])})? "
                             "rename it or the kernel in the op file's `dispatch:` so that the "
                             "two match")
        return "\n".join(parts)
    for info in infos:
        parts.append(f"{prefix}'{qname}' is the {'; '.join(info.uses)}; for the schema\n"
                     f"    {info.schema}\n"
                     f"  the dispatcher calls it as ({info.header}:{info.line})\n"
                     f"    {info.decl}")
    parts.append("hint: change the definition to match, or the schema in the op file")
    return "\n".join(parts)


def _duplicate_note(qname: str, infos: list[KernelInfo], places: list[str]) -> str:
    """A function the linker found defined in two objects: where the kernel sources define a
    function of that name (the linker names objects, not lines)."""
    prefix = f"{places[0]}: note: " if places else "note: "
    at = (f" (functions named '{_unqualified(qname)}': {', '.join(places)})"
          if len(places) > 1 else "")
    if infos:
        return (f"{prefix}'{qname}' is the {_uses(infos)}, and more than one kernel source defines "
                f"it{at}\nhint: keep one definition; the other sources call it through its "
                "header, which declares it")
    return (f"{prefix}'{qname}' is defined in more than one kernel source{at}\n"
            "hint: make each 'static' or move it into an anonymous namespace, or keep one "
            "definition and declare it in a header the others include")


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


# Kernel sources are compiled without Python's headers (Note [Toolchain] in
# codegen/toolchain.py): the tutorials'
# `#include <torch/extension.h>` / `<Python.h>` and module-init blocks have no place in them.
_PYTHON_BLOCK = re.compile(r"\bPYBIND11_MODULE\s*\(|\bPyMODINIT_FUNC\b|\bPyInit_\w+")
_INCLUDED_FROM = re.compile(r"^(?:In file included from|\s+from) (\S+?):(\d+)[,:]$")


def python_header_note(line: str, chain: list[tuple[str, int]], root: Path,
                       stable: bool = False) -> str | None:
    """The note after `fatal error: Python.h: No such file or directory`, located at the kernel
    source's include (itself, or the torch header that pulls it in, as `chain` shows)."""
    missing = _missing_header(line)
    if missing is None or missing[1] != "Python.h":
        return None
    m = missing[0]
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
        self.indexes: list[dict] = []         # namespace_indexes, read once
        self.stable: dict[str, str] = {}
        self.owner: dict[str, str] = {}       # kernel source -> its namespace
        self.chain: list[tuple[str, int]] = []
        self.noted: set[str] = set()
        self.defined: dict[str, list[str]] = {}
        self.said: set[str] = set()           # notes already shown (a linker repeats an error)

    def _load(self) -> None:
        self.indexes = namespace_indexes(self.root)
        self.index = kernel_index(self.root, self.indexes)
        self.stable = stable_namespaces(self.root, self.indexes)
        sources = kernel_sources(config.current(), generated_namespaces(self.root), self.root)
        self.owner = {src: ns for ns, v in sources.items() for src, _ in v}
        self.defined = source_functions(self.root, list(self.owner))

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
        if ("error" not in line and "undefined reference" not in line
                and "multiple definition" not in line):
            return None
        if self.index is None:
            self._load()
        assert self.index is not None
        source = chain[-1][0] if chain else line.split(":", 1)[0]
        ns = self.namespace(source)
        note = (kernel_note(line, self.index, self.root, self.defined, self.owner)
                or python_header_note(line, chain, self.root, ns in self.stable)
                or generated_header_note(line, self.root, self.indexes, self.owner)
                or stable_header_note(line, self.stable, ns)
                or min_torch_note(line, ns, self.stable, self.root, self.noted))
        if note in self.said:
            return None
        if note:
            self.said.add(note)
        return note
