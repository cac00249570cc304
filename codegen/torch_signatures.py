"""The Python signatures of torch's functions and tensor methods, recorded from the pinned torch
(`python -m codegen.formulas --refresh` writes torch_signatures.json; a test checks that
the record matches the installed torch), so that `check` refuses a formula's call that no
signature takes (`grad.sum(dimm=0)`, `torch.where(c, x)`) without importing torch.

Note [Torch signatures]
A formula calling torch with a misspelled keyword or the wrong number of arguments used to pass
`check` and fail at backward, in Python with torch's TypeError, in C++ as a compile error. The
signatures come from what torch ships: the stubs torchgen writes from the same declarations as
its argument parser (`torch/_C/_VariableFunctions.pyi` for `torch.*`, `TensorBase` in
`torch/_C/__init__.pyi` for tensor methods, `torch/nn/functional.pyi`), and `inspect.signature`
of the functions torch defines in Python. A call passes where one of the callable's signatures
binds it as Python binds arguments. Callables with no signature on record (torch.linalg,
torch.fft and torch.special are builtins without stubs) are not checked. Where the installed
torch is not the recorded one, a call the record refuses is checked again against the installed
torch's own signatures before it is an error, so a newer torch's additions still pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ast

RECORD_FILE = "torch_signatures.json"
# The modules whose callables are recorded: those of the formula vocabulary that have signatures.
MODULES = ("torch", "torch.Tensor", "torch.nn.functional", "torch.autograd", "torch.nn")


@dataclass(frozen=True)
class Signature:
    """One way to call a callable. Its record spells it as space-separated parameters: `name?`
    one with a default, `/name` positional-only, `*name` the varargs, `*` the start of the
    keyword-only ones, `**` a **kwargs (Signature.parse)."""
    text: str
    positional: tuple[tuple[str, bool, bool], ...]   # (name, has default, positional-only)
    varargs: bool
    keyword: tuple[tuple[str, bool], ...]            # (name, has default)
    varkw: bool

    @staticmethod
    def parse(text: str) -> Signature:
        positional: list[tuple[str, bool, bool]] = []
        keyword: list[tuple[str, bool]] = []
        varargs = varkw = star = False
        for p in text.split():
            if p == "**":
                varkw = True
            elif p.startswith("*"):
                star = True
                varargs = varargs or p != "*"
            elif star:
                keyword.append((p.rstrip("?"), p.endswith("?")))
            else:
                positional.append((p.lstrip("/").rstrip("?"), p.endswith("?"), p.startswith("/")))
        return Signature(text, tuple(positional), varargs, tuple(keyword), varkw)

    def names(self) -> set[str]:
        """The names a keyword argument may have."""
        return {n for n, _, only in self.positional if not only} | {n for n, _ in self.keyword}

    def takes(self, positional: int | None, keywords: list[str]) -> bool:
        """Whether this signature binds `positional` positional arguments (None: unknown, a
        `*args` was given) and `keywords`."""
        params = self.positional
        n = positional if positional is not None else 0
        if positional is not None and n > len(params) and not self.varargs:
            return False
        by_name = {name: only for name, _, only in params}
        given = {name for name, _, _ in params[:n]}
        kw_only = dict(self.keyword)
        for key in keywords:
            if key in given:
                return False        # given positionally and by keyword
            if not ((key in by_name and not by_name[key]) or key in kw_only or self.varkw):
                return False
        if positional is not None:
            if any(not default and name not in keywords for name, default, _ in params[n:]):
                return False
        return all(default or name in keywords for name, default in self.keyword)

    def show(self, name: str) -> str:
        """Python's spelling: `sum(dim, keepdim=..., *, dtype=...)`."""
        out = []
        for p in self.text.split():
            if p == "**":
                out.append("**kwargs")
            elif p.endswith("?"):
                out.append(p.lstrip("/")[:-1] + "=...")
            else:
                out.append(p.lstrip("/"))
        return f"{name}({', '.join(out)})"


@lru_cache(maxsize=1)
def _record() -> dict:
    return json.loads(resources.files("codegen").joinpath(RECORD_FILE).read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def signatures(module: str, name: str) -> tuple[Signature, ...] | None:
    """The signatures of `module`.`name` (module one of MODULES; None: not on record, so not
    checked)."""
    texts = _record()["modules"].get(module, {}).get(name)
    return None if texts is None else tuple(map(Signature.parse, texts))


def binds(sigs: tuple[Signature, ...], module: str, name: str, positional: int | None,
          keywords: list[str]) -> bool:
    """Whether one of `sigs`, the record's signatures of `module`.`name`, takes the call (see
    Signature.takes); where none does and the installed torch is another version, that torch
    decides."""
    if any(s.takes(positional, keywords) for s in sigs):
        return True
    if _installed_version() in (None, _record()["torch"]):
        return False
    mine = installed(module, name)
    return mine is None or any(Signature.parse(t).takes(positional, keywords) for t in mine)


def _installed_version() -> str | None:
    from importlib import metadata     # not at import: `check` imports this module

    try:
        return metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------------------------------
# Reading them from the installed torch (imports torch: `--refresh`, the test, a newer torch)


def _spell(args: ast.arguments, drop_first: bool) -> str:
    """A stub's parameters as the record spells them."""
    posonly = list(args.posonlyargs)
    plain = list(args.args)
    every = posonly + plain
    first_default = len(every) - len(args.defaults)
    out = []
    for i, a in enumerate(every):
        if drop_first and i == 0:
            continue
        out.append(("/" if i < len(posonly) else "") + a.arg + ("?" if i >= first_default else ""))
    if args.vararg is not None:
        out.append("*" + args.vararg.arg)
    elif args.kwonlyargs:
        out.append("*")
    for a, default in zip(args.kwonlyargs, args.kw_defaults):
        out.append(a.arg + ("?" if default is not None else ""))
    if args.kwarg is not None:
        out.append("**")
    return " ".join(out)


def _stub_defs(path: Path, cls: str | None = None) -> dict[str, list[str]]:
    """name -> the signatures of the functions (or of `cls`'s methods) a stub file declares."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = tree.body
    if cls is not None:
        body = next(n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    out: dict[str, list[str]] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef):
            static = any(isinstance(d, ast.Name) and d.id == "staticmethod"
                         for d in node.decorator_list)
            text = _spell(node.args, drop_first=cls is not None and not static)
            if text not in out.setdefault(node.name, []):
                out[node.name].append(text)
    return out


def _from_inspect(fn, drop_first: bool) -> list[str] | None:
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    out = []
    star = False
    params = list(sig.parameters.values())[1 if drop_first else 0:]
    for p in params:
        default = "?" if p.default is not inspect.Parameter.empty else ""
        if p.kind is p.POSITIONAL_ONLY:
            out.append(f"/{p.name}{default}")
        elif p.kind is p.POSITIONAL_OR_KEYWORD:
            out.append(p.name + default)
        elif p.kind is p.VAR_POSITIONAL:
            out.append("*" + p.name)
            star = True
        elif p.kind is p.KEYWORD_ONLY:
            if not star:
                out.append("*")
                star = True
            out.append(p.name + default)
        else:
            out.append("**")
    return [" ".join(out)]


@lru_cache(maxsize=1)
def _stubs() -> dict[str, dict[str, list[str]]]:
    """The installed torch's stubs: module -> name -> signatures."""
    import torch

    root = Path(torch.__file__).parent
    return {"torch": _stub_defs(root / "_C" / "_VariableFunctions.pyi"),
            "torch.Tensor": _stub_defs(root / "_C" / "__init__.pyi", "TensorBase"),
            "torch.nn.functional": _stub_defs(root / "nn" / "functional.pyi"),
            "torch._C._nn": _stub_defs(root / "_C" / "_nn.pyi")}


def installed(module: str, name: str) -> list[str] | None:
    """The signatures of `module`.`name` in the installed torch, as the record spells them
    (None: it has none to check against)."""
    import importlib
    import inspect

    import torch

    tensor = module == "torch.Tensor"
    obj = torch.Tensor if tensor else importlib.import_module(module)
    try:
        value = inspect.getattr_static(obj, name) if tensor else getattr(obj, name)
    except AttributeError:
        return None
    if inspect.isfunction(value):
        return _from_inspect(value, drop_first=tensor)
    if isinstance(value, type) or not callable(value):
        return None     # classes, constants, properties: not checked
    stubs = _stubs()
    if tensor:
        return stubs[module].get(name)
    # builtins: their own module's stub, else that of the module defining them (F.conv2d is
    # torch.conv2d, F.linear torch._C._nn.linear)
    own = getattr(value, "__name__", name)
    home = "torch._C._nn" if getattr(value, "__module__", None) == "torch._C._nn" else "torch"
    return stubs.get(module, {}).get(name) or stubs[home].get(own)


def current(names: dict[str, list[str]]) -> dict:
    """What the record holds, from the installed torch, for the formula vocabulary `names`
    (module -> its names: codegen.formulas.torch_names)."""
    import torch

    modules = {module: {name: sigs for name in names[module]
                        if (sigs := installed(module, name))} for module in MODULES}
    return {"torch": torch.__version__.split("+")[0], "modules": modules}
