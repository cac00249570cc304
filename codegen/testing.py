"""Checks of an op library driven by the `samples:` of its op files.

Each op's samples become real calls, and each call goes through the checks a PyTorch op must
pass to work everywhere:

    from codegen import testing         # `from runtime import testing` loads the built libraries
    for case in testing.load_cases(["schemas"]):
        testing.check_opcheck(case)     # torch.library.opcheck, its four utilities
        testing.check_gradients(case)   # gradcheck (+ gradgradcheck), ops with gradients
        testing.check_compile(case)     # torch.compile(fullgraph=True, inductor), sizes varied
        testing.check_export(case)      # torch.export, save, load, run
        testing.check_seeded(case)      # random ops: the seed, or the Generator, decides
        testing.check_vmap(case)        # ops with a batching rule: vmap == a loop
        testing.check_autocast(case)    # ops with an autocast policy: inputs cast
        testing.check_devices(case)     # with a GPU: CUDA results == CPU results
        testing.check_cudagraph(case)   # with a GPU: CUDA-graph capture and replay == eager

Every check reads what the op file declares: derivative formulas that are `not_implemented` and
`output_differentiability: false` outputs are not differentiated, `nondeterministic_seeded` ops are
reseeded before each run they are compared across, `gradcheck:` sets the dtype and tolerances of
the gradient check (floating `ScalarType` arguments follow that dtype), CompositeImplicitAutograd
ops are gradchecked through their decomposition, and mutated arguments are compared after compile
and export as well as the results. `applies(case, check)` says which checks a case has: what torch
cannot pass on an op by its own design, as a warning of the op says, is skipped (`skipped`:
compile on a lone non-Tensor or a Dict return, export on a Dict return; compile, export and
opcheck's test_aot_dispatch_dynamic on an op torch cannot functionalize, `opcheck_skipped`).

Every check raises AssertionError (or the error PyTorch raised) on failure and returns what it ran
on success, so the same functions serve a pytest suite (tests/test_samples.py parametrizes them
over every sample of the example library) or a user's own script over their library.
`run_check` runs one through a library's known failures (`load_failures`, the
`sample_failures.yaml` beside its op files): a listed check must still fail, and one that passes
is reported so that its entry gets removed.

This module imports no op library: `load_python_library` defines the ops of op files whose kernels
are all Python in this process, with nothing built (other namespaces included).

Sample inputs are deterministic: random contents come from a generator seeded with the case's id.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import io
import os
import sys
import types
import warnings
import zlib
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence,
                    TypeAlias)

import torch

from codegen import enums
from codegen.contract import differentiable_inputs, differentiated_through, implemented_inputs
from codegen.diagnostics import Diagnostics, UserError
from codegen.model import (
    AUTOCAST_DTYPE,
    BaseTy,
    BaseType,
    DispatchKey,
    FunctionSchema,
    GradcheckSpec,
    ListType,
    Op,
    OpLibrary,
    OpOutput,
    Sample,
    SymDim,
    TensorSample,
    Type,
    strip_optional,
)
from codegen.sample_failures import (
    CHECKS,
    DEVICE_CHECKS,
    OPCHECK_UTILS,
    differentiable_outputs,
    failures_files,
    generator_arguments,
    has_dynamic_output,
    opcheck_skips,
    opcheck_utils,
    read_failures,
    sample_has_gradients,
    sample_id,
    kernel_devices,
    why_not,
    written_outputs,
)

if TYPE_CHECKING:
    from codegen import config

__all__ = [
    "ALL_OPCHECK_UTILS", "CHECKS", "COMPILE_SCALES", "DEVICE_CHECKS", "devices", "Case", "Failures", "NoLongerFails",
    "PythonLibrary", "SampleFailuresWarning", "differentiable_outputs", "generator_arguments", "make_named", "split_call",
    "applies", "check", "check_autocast", "check_cudagraph", "check_devices", "check_compile", "check_export", "check_gradients",
    "check_opcheck", "check_seeded", "check_vmap", "differentiable_inputs", "gradcheck_spec",
    "has_dynamic_output",
    "has_gradients", "is_mutating", "load_cases", "load_failures", "load_python_library",
    "make_inputs", "make_tensor", "make_value", "opcheck_skipped", "run_check", "skipped",
    "symbolic_dims",
]

ALL_OPCHECK_UTILS = OPCHECK_UTILS


# The compile check runs each sample at these multiples of its named sizes (`N=4` -> 4, 8, 12);
# sizes a sample does not name stay as written.
COMPILE_SCALES = (1, 2, 3)

_ENUMS = {
    "strided": torch.strided, "sparse_coo": torch.sparse_coo, "jagged": torch.jagged,
    "contiguous_format": torch.contiguous_format, "preserve_format": torch.preserve_format,
    "channels_last": torch.channels_last, "channels_last_3d": torch.channels_last_3d,
}


@dataclass(frozen=True)
class Case:
    """One sample of one op."""

    op: Op
    sample: Sample
    index: int

    @property
    def id(self) -> str:
        return sample_id(self.op, self.sample, self.index)

    @property
    def overload(self) -> torch._ops.OpOverload:
        return _overload(self.op.name)

    @property
    def seed(self) -> int:
        return _seed(self.id)

    def inputs(self, **options: Any) -> tuple[tuple, dict]:
        """Fresh (args, kwargs) for this sample; see `make_inputs` for the options."""
        return make_inputs(self.op, self.sample, seed=self.seed, **options)


# Op files or directories: one path alone, or several.
OpPaths: TypeAlias = "str | os.PathLike[str] | Iterable[str | os.PathLike[str]]"


def _op_paths(paths: OpPaths, caller: str) -> list[str]:
    """`paths` as a list of strings: one path may be given alone (a string is not a list of its
    characters)."""
    takes = (f"{caller}() takes op file or directory paths (a str, an os.PathLike, or a list "
             "of them)")
    try:
        items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    except TypeError:
        raise TypeError(f"{takes}, not {type(paths).__name__}") from None
    for p in items:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"{takes}; one of them is {type(p).__name__}: {p!r}")
    return [os.fspath(p) for p in items]


def load_cases(paths: OpPaths) -> list[Case]:
    """Every sample of every op in the op files (or directories) `paths`."""
    from codegen.load import load_library

    paths = _op_paths(paths, "load_cases")
    with _user_errors():
        lib = load_library(paths)
    note_library(lib.ops)
    return [Case(op, s, i) for op in lib.ops for i, s in enumerate(op.samples)]


@dataclass
class PythonLibrary:
    """An op library loaded without building anything (see `load_python_library`)."""

    ops: list[Op]
    modules: dict[str, types.ModuleType]           # namespace -> its registrations module
    libraries: list[torch.library.Library] = field(default_factory=list)
    # The registrations modules this library put in sys.modules, which close() removes.
    module_names: list[str] = field(default_factory=list)
    stand_in: _StandIn | None = None    # the generated subpackage from memory, if any

    def cases(self) -> list[Case]:
        return [Case(op, s, i) for op in self.ops for i, s in enumerate(op.samples)]

    def close(self) -> None:
        """Remove every definition and registration (the namespaces can be loaded again)."""
        for m in self.modules.values():
            m._lib._destroy()
            if "_vmap_lib" in m.__dict__:     # the positional twins (codegen/dest/py_vmap.py)
                m._vmap_lib._destroy()
        for lib in self.libraries:
            lib._destroy()
        self.libraries.clear()
        if self.stand_in is not None:
            if self.stand_in in sys.meta_path:
                sys.meta_path.remove(self.stand_in)
            for name in [n for n in sys.modules if self.stand_in.made(n)]:
                del sys.modules[name]
        for name in self.module_names:
            sys.modules.pop(name, None)
        self.module_names.clear()
        _LOADED[:] = [lib for lib in _LOADED if lib is not self]


# Libraries loaded and not closed. torch.library.Library removes its registrations when it is
# garbage collected, so a caller dropping the result (`load_python_library(["ops.yaml"])` as a
# statement) would otherwise find no ops; they stay until close(), as a built library stays.
_LOADED: list[PythonLibrary] = []


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The generated subpackage of a project's package (`<package>._generated`) made from
    memory, for a library `load_python_library` defines: its generated `__init__` and `ops`, over
    a loader with nothing to load. A Python kernel in the package imports the package, whose
    `__init__.py` imports the generated subpackage; from disk that would load the built
    libraries (not built yet, or defining the namespaces a second time).

    The package's modules imported while it stands (the package's own included) bound this
    library's ops: `made` tells them, for close() to forget."""

    def __init__(self, package: str, generated: str, texts: dict[str, str]) -> None:
        self.package = package          # the project's package
        self.generated = generated      # the generated subpackage's name
        self.texts = texts              # module name -> its source
        self.before = frozenset(n for n in sys.modules if self._in_package(n))

    def _in_package(self, name: str) -> bool:
        return name == self.package or name.startswith(self.package + ".")

    def made(self, name: str) -> bool:
        return self._in_package(name) and name not in self.before

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.texts:
            return None
        return importlib.util.spec_from_loader(name, self, origin=f"<generated {name}>",
                                               is_package=name == self.generated)

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__
        exec(compile(self.texts[name], f"<generated {name}>", "exec"), module.__dict__)


def load_python_library(paths: OpPaths,
                        project: config.Project | None = None) -> PythonLibrary:
    """Define the ops of op files whose kernels are all Python, in this process, and run their
    generated registrations from memory: a library to try or test before any C++ exists.

    Each namespace is defined with `torch.library.Library(ns, "DEF")` (so it must not be loaded
    already; a namespace torch defines gets a "FRAGMENT") and gets the module `<package>._reg_<ns>`
    would be, from the same generator, under that name in sys.modules. Nothing else is loaded:
    other namespaces need not be built.
    `project` (a codegen.config.Project) names the modules; by default the active one, else the
    op files' own (the nearest pyproject.toml with [tool.opgen] above the first of them, else
    above the working directory), else the example layout.
    Where the project generates into its package (the default layout), its generated subpackage
    comes from memory too, until close(): the package, which a Python kernel inside it imports,
    then binds the ops of this library and loads no built one. close() also forgets the modules
    of the package imported meanwhile, as they bound those ops.
    The library stays loaded until its `close()`, whether or not the caller keeps the result.
    """
    from codegen import config
    from codegen.dest import py_ops
    from codegen.dest.py_reg import generate_registrations
    from codegen.rendering import python_dir
    from codegen.load import load_library

    paths = _op_paths(paths, "load_python_library")
    with _user_errors():
        if project is None:
            project = config.active() or _project_of(paths)
        relative = [project.relative(p) for p in paths]     # before `use` moves to its root
        with config.use(project):
            lib = load_library(relative)
            diags = lib.diagnostics()
            texts = generate_registrations(lib, diags, project)
            if project.generated_in_package:
                texts |= py_ops.generate_ops(lib, diags, project)
                texts |= py_ops.generate_init(lib, diags, project)
            diags.raise_if_errors()
    note_library(lib.ops)
    out = PythonLibrary(list(lib.ops), {})
    prefix = project.module_prefix
    here = python_dir(project)
    if project.generated_in_package and prefix not in sys.modules:
        # The loader is the one part not generated: the ops are defined here, nothing loads.
        loader = ("from codegen.loader import LibraryError\n\n\ndef load_package(package):\n"
                  f"    return {list(lib.namespaces)!r}\n")
        out.stand_in = _StandIn(project.package, prefix,
                                {prefix: texts[f"{here}/__init__.py"],
                                 f"{prefix}.ops": texts[f"{here}/ops.py"],
                                 f"{prefix}._loader": loader})
        sys.meta_path.insert(0, out.stand_in)
    try:
        _define(out, lib, project, texts)
    except BaseException:
        out.close()
        raise
    _LOADED.append(out)
    return out


def _project_of(paths: list[str]) -> config.Project:
    """The project of op files `paths`: the nearest [tool.opgen] above the first of them, else
    above the working directory, else the example layout there."""
    from pathlib import Path

    from codegen import config

    first = Path(paths[0]) if paths else Path.cwd()
    found = config.find_config(first if first.is_dir() else first.parent) or \
        config.find_config(Path.cwd())
    if found is None:
        return config.default_project(Path.cwd())
    return config.load(found, Diagnostics())


def _define(out: PythonLibrary, lib: OpLibrary, project: config.Project,
            texts: dict[str, str]) -> None:
    """Define `lib`'s namespaces and run their registrations modules (into `out`)."""
    from codegen.dest.py_common import module_name
    from codegen.model import OperatorName
    from codegen.rendering import python_dir
    from codegen.torch_namespaces import is_torch_namespace

    for ns in lib.namespaces:
        defs = torch.library.Library(ns, "FRAGMENT" if is_torch_namespace(ns) else "DEF")
        out.libraries.append(defs)
        for op in lib.ops:
            if op.namespace == ns:
                n = op.name
                schema = op.schema.with_name(OperatorName(None, n.name, n.overload))
                defs.define(str(schema), tags=tuple(getattr(torch.Tag, t) for t in op.tags))
        text = texts[f"{python_dir(project)}/_reg_{ns}.py"]
        name = module_name(project, ns)
        module = types.ModuleType(name)
        # In sys.modules while it runs, as an import puts it: a kernel module may import it.
        if sys.modules.setdefault(name, module) is module:
            out.module_names.append(name)
        exec(compile(text, f"<generated {name}>", "exec"), module.__dict__)
        out.modules[ns] = module


def _seed(text: str) -> int:
    return zlib.crc32(text.encode())


# --------------------------------------------------------------------------------------------------
# Samples -> values


def _size(v: int | SymDim, sizes: Mapping[str, int]) -> int:
    return sizes[v.name] if isinstance(v, SymDim) else v


def _bound(v: float | SymDim | None, sizes: Mapping[str, int]) -> float | None:
    return float(sizes[v.name]) if isinstance(v, SymDim) else v


def make_tensor(t: TensorSample, *, generator: torch.Generator, dtype: torch.dtype | None = None,
                sizes: Mapping[str, int] | None = None, device: str | torch.device = "cpu",
                requires_grad: bool | None = None) -> torch.Tensor:
    """A tensor for a sample: given values, or random ones in [low, high).

    `dtype` overrides a floating sample's dtype (the gradient check's dtype), and gives a
    complex sample its precision (complex128 for float64); `sizes` gives the named sizes (`N`
    in a shape) their values (default: the sample's).
    """
    sizes = sizes or {}
    target = _check_dtype(getattr(torch, t.dtype), dtype)
    if t.values is not None:
        x = torch.tensor(t.values, dtype=target)
    else:
        shape = [_size(d, sizes) for d in t.shape]
        low, high = _bound(t.low, sizes), _bound(t.high, sizes)
        if target == torch.bool:
            x = torch.randint(0, 2, shape, generator=generator).bool()
        elif target.is_floating_point or target.is_complex:
            low = -1.0 if low is None else low
            high = 1.0 if high is None else high
            x = torch.rand(shape, generator=generator, dtype=torch.float64) * (high - low) + low
            if target.is_complex:
                # Imaginary parts too: with real values, a formula missing a conj() passes.
                imag = torch.rand(shape, generator=generator, dtype=torch.float64)
                x = torch.complex(x, imag * (high - low) + low)
            x = x.to(target)
        else:
            lo = 0 if low is None else int(low)
            hi = 10 if high is None else int(high)
            x = torch.randint(lo, hi, shape, generator=generator, dtype=target)
    x = x.to(device)
    grad = t.requires_grad if requires_grad is None else requires_grad
    if grad and (x.is_floating_point() or x.is_complex()):
        x.requires_grad_(True)
    return x


_FLOAT8 = frozenset(getattr(torch, n) for n in enums.DTYPE_NAMES if n.startswith("float8_")
                   and hasattr(torch, n))


def _check_dtype(chosen: torch.dtype, dtype: torch.dtype | None) -> torch.dtype:
    """A sample's dtype in the gradient check's `dtype`: floating ones take it; complex ones take
    its precision (gradcheck of a complex64 input at float64's tolerances fails on rounding).
    float8 is a storage format, not a precision: its kernels take it alone, and gradcheck cannot
    step it, so it stays."""
    if dtype is None or chosen in _FLOAT8:
        return chosen
    if chosen.is_floating_point:
        return dtype
    if chosen.is_complex:
        return dtype if dtype.is_complex else dtype.to_complex()
    return chosen


def make_value(value: Any, t: Type, *, generator: torch.Generator, dtype: torch.dtype | None,
               sizes: Mapping[str, int], device: str | torch.device,
               requires_grad: bool | None, made: dict | None = None) -> Any:
    """A sample value of an argument of schema type `t` -> what the op is called with. `made`
    keeps the outputs of the ops that a sample calls (OpOutput) for the rest of the sample."""
    if value is None:
        return None
    base = strip_optional(t)
    if isinstance(base, ListType):
        return [make_value(v, base.elem, generator=generator, dtype=dtype, sizes=sizes,
                           device=device, requires_grad=requires_grad, made=made)
                for v in value]
    if isinstance(value, TensorSample):
        return make_tensor(value, generator=generator, dtype=dtype, sizes=sizes, device=device,
                           requires_grad=requires_grad)
    if isinstance(value, OpOutput):
        return _op_output(value, generator=generator, dtype=dtype, sizes=sizes, device=device,
                          made={} if made is None else made)
    if isinstance(value, SymDim):
        return sizes[value.name]
    if isinstance(base, BaseType):
        name = base.name
        if name is BaseTy.ScalarType:
            # The gradient check's dtype reaches dtype arguments too (`out_dtype=float32` with
            # float64 inputs would cut the Jacobian's precision).
            return _check_dtype(getattr(torch, value), dtype)
        if name is BaseTy.Device:
            return torch.device(value)
        if name in (BaseTy.Layout, BaseTy.MemoryFormat):
            return _ENUMS[value]
    return value


def _op_output(value: OpOutput, *, generator: torch.Generator, dtype: torch.dtype | None,
               sizes: Mapping[str, int], device: str | torch.device, made: dict) -> torch.Tensor:
    """The tensor an OpOutput stands for: its op called (once per sample for the same
    arguments) on arguments made as the sample's are, but in their own dtypes; a floating
    output then takes the check's `dtype`, as a floating tensor sample would."""
    key = (value.schema.name, value.args)
    if key not in made:
        given = dict(value.args)
        named = {a.name: make_value(given[a.name], a.type, generator=generator, dtype=None,
                                    sizes=sizes, device=device, requires_grad=False, made=made)
                 for a in value.schema.arguments if a.name in given}
        a, k = split_call_schema(value.schema, named)
        try:
            with torch.no_grad():
                out = _overload(value.schema.name)(*a, **k)
        except Exception as e:
            e.add_note(f"(making the sample's `output_of: {value.schema.name}`, on its `args:`)")
            raise
        made[key] = out if len(value.schema.returns) != 1 else (out,)
    out = made[key][value.output]
    assert isinstance(out, torch.Tensor), (
        f"{value.schema.name} returned {type(out).__name__} for return {value.output}, "
        "which a sample takes as a Tensor")
    return out.detach().to(_check_dtype(out.dtype, dtype))


def make_named(op: Op, sample: Sample, *, seed: int = 0, dtype: torch.dtype | None = None,
               sizes: Mapping[str, int] | None = None, device: str | torch.device = "cpu",
               requires_grad: bool | None = None) -> dict[str, Any]:
    """Argument name -> value for every argument `sample` gives, in schema order."""
    gen = torch.Generator().manual_seed(seed)
    values = dict(sample.dims)
    values.update(sizes or {})
    given = dict(sample.args)
    made: dict = {}
    return {a.name: make_value(given[a.name], a.type, generator=gen, dtype=dtype, sizes=values,
                               device=device, requires_grad=requires_grad, made=made)
            for a in op.schema.arguments if a.name in given}


def split_call(op: Op, named: Mapping[str, Any]) -> tuple[tuple, dict]:
    """(args, kwargs) calling `op`: positional arguments in order up to the first one `named`
    leaves out; the rest, and keyword-only ones, by name."""
    return split_call_schema(op.schema, named)


def split_call_schema(schema: FunctionSchema, named: Mapping[str, Any]) -> tuple[tuple, dict]:
    """`split_call` for an op given by its schema."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    positional = True
    for a in schema.arguments:
        if a.name not in named:
            positional = False
            continue
        if positional and not a.kwarg_only:
            args.append(named[a.name])
        else:
            kwargs[a.name] = named[a.name]
    return tuple(args), kwargs


def make_inputs(op: Op, sample: Sample, **options: Any) -> tuple[tuple, dict]:
    """(args, kwargs) calling `op` on `sample` (`make_named`'s options: seed, dtype, sizes,
    device, requires_grad)."""
    return split_call(op, make_named(op, sample, **options))


def _clone(x: Any) -> Any:
    """A deep copy of call inputs (tensors keep their requires_grad, as leaves)."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _detach(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, (list, tuple)):
        return type(x)(_detach(v) for v in x)
    if isinstance(x, dict):
        return {k: _detach(v) for k, v in x.items()}
    return x


def _assert_same(actual: Any, expected: Any, what: str) -> None:
    try:
        torch.testing.assert_close(_detach(actual), _detach(expected), equal_nan=True)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


def _mutated(op: Op, named: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments `op` writes to (`Tensor(a!)`), by name."""
    return {a.name: named[a.name] for a in op.schema.mutable_arguments if a.name in named}


@contextlib.contextmanager
def _reseeded(op: Op, seed: int) -> Iterator[None]:
    """Reseed torch's generator for a run of a `nondeterministic_seeded` op, so that runs
    compared with each other draw the same numbers; other ops run as they are."""
    if "nondeterministic_seeded" in op.tags:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    else:
        yield


# --------------------------------------------------------------------------------------------------
# What an op declares


def _composite_implicit(op: Op) -> bool:
    return op.kernel(DispatchKey.CompositeImplicitAutograd) is not None


def has_gradients(case: Case) -> bool:
    """Whether `check_gradients` has something to check: a floating (or complex) tensor given
    for a differentiable input, not marked `requires_grad: false`, and a differentiable output."""
    return sample_has_gradients(case.op, case.sample, _LIBRARY_OPS.values())


def is_mutating(op: Op) -> bool:
    return bool(op.schema.mutable_arguments)


def _dim_names(v: Any) -> set[str]:
    if isinstance(v, SymDim):
        return {v.name}
    if isinstance(v, TensorSample):
        return {d.name for d in (*v.shape, v.low, v.high) if isinstance(d, SymDim)}
    if isinstance(v, tuple):
        return {n for x in v for n in _dim_names(x)}
    return set()


def symbolic_dims(case: Case) -> list[str]:
    """The named sizes of the sample that the compile check varies and marks dynamic: all but
    those given to a plain `int` argument (torch.compile specializes ints; `SymInt` varies)."""
    static: set[str] = set()
    for a in case.op.schema.arguments:
        base = strip_optional(a.type)
        if isinstance(base, ListType):
            base = strip_optional(base.elem)
        if isinstance(base, BaseType) and base.name is BaseTy.int:
            static |= _dim_names(dict(case.sample.args).get(a.name))
    return [n for n, _ in case.sample.dims if n not in static]


def applies(case: Case, check: str) -> bool:
    """Whether `check` has something to check on `case` here (the GPU checks need a GPU), and
    torch can pass it (`skipped`)."""
    if skipped(case, check) is not None:
        return False
    return check not in DEVICE_CHECKS or torch.cuda.is_available()


def skipped(case: Case, check: str) -> str | None:
    """Why `check` does not run on `case` (None: it runs, given a GPU for the GPU checks): it has
    nothing to check, or torch cannot pass it on the op by its own design, as a warning of the
    op says (torch.compile on an op returning a lone int, and torch.export on one whose
    returns the saved program loses, a Dict or an int[], -Wnon-tensor-return; compile and export
    on an op torch cannot functionalize, -Wnot-functionalizable)."""
    return why_not(case.op, case.sample, check, _LIBRARY_OPS.values())


def opcheck_skipped(case: Case) -> str | None:
    """Which utilities `check_opcheck` leaves out on `case` by default, and why (None: none)."""
    return opcheck_skips(case.op, _LIBRARY_OPS.values(), case.sample)


# --------------------------------------------------------------------------------------------------
# The checks


def check_opcheck(case: Case, test_utils: Iterable[str] | None = None) -> dict[str, str]:
    """`torch.library.opcheck` on the sample, with `test_utils`; by default every one of
    ALL_OPCHECK_UTILS that torch can pass on the op: those that functionalize it are left out
    for an op torch cannot functionalize (its not-functionalizable warning; `opcheck_skipped`),
    and test_schema on a sample giving a float8 tensor, which it cannot compare. Differentiable
    inputs require grad (so the autograd registration is exercised) unless the sample says
    `requires_grad: false`; no other input does (a `not_implemented` gradient would raise in
    the backward opcheck runs)."""
    # An argument the op writes stays a leaf not requiring grad: writing one that does is
    # refused (as for aten's in-place ops), and opcheck copies it, which a non-leaf refuses.
    diff = set(differentiable_inputs(case.op, _LIBRARY_OPS.values())) - {
        a.name for a in case.op.schema.mutable_arguments}
    named = make_named(case.op, case.sample, seed=case.seed)
    named = _require_grad(case, named, diff)
    if test_utils is None:
        test_utils = opcheck_utils(case.op, _LIBRARY_OPS.values(), case.sample)
        if any(t.dtype in _FLOAT8 for t in _flat_tensors(list(named.values()))):
            # A float8 tensor another op made (OpOutput): its dtype shows only now.
            test_utils = [u for u in test_utils if u != "test_schema"]
    args, kwargs = split_call(case.op, named)
    return torch.library.opcheck(case.overload, args, kwargs, test_utils=tuple(test_utils))


def _require_grad(case: Case, named: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """Floating tensors of `names` require grad, except those the sample marks
    `requires_grad: false`; no other tensor does."""
    given = dict(case.sample.args)

    def mark(x: Any, raw: Any, on: bool) -> Any:
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
            on = on and not (isinstance(raw, TensorSample) and raw.requires_grad is False
                             or isinstance(raw, OpOutput))
            return x.detach().requires_grad_(on) if on or x.requires_grad else x
        if isinstance(x, list):
            raws = raw if isinstance(raw, tuple) else (None,) * len(x)
            return [mark(v, r, on) for v, r in zip(x, raws)]
        return x

    return {k: mark(v, given.get(k), k in names) for k, v in named.items()}


def _cloned(x: Any) -> Any:
    """`x` with each tensor in it cloned (through autograd)."""
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, list):
        return [_cloned(v) for v in x]
    return x


def _flat_tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat_tensors(v)]
    return []


def _returns(op: Op, out: Any) -> list[Any]:
    """The op's output as one value per return."""
    return [out] if len(op.schema.returns) == 1 else list(out)


def check_gradients(case: Case, *, second_order: bool | None = None) -> bool:
    """gradcheck of the op's gradients on the sample, in the op's `gradcheck:` dtype (float64 by
    default) with its tolerances, through the differentiable outputs only; then, when the
    backward is differentiable (`second_order`, by default: every library op it calls has
    gradients), gradgradcheck, and otherwise that a second backward raises an error naming the
    op. A second derivative that runs into a `not_implemented` formula of an op the backward
    calls must raise that formula's NotImplementedError, naming the op.

    Returns False when the sample has no floating input with gradients (nothing to check)."""
    from codegen.formulas import constant_reads_of

    op = case.op
    library = _LIBRARY_OPS.values()
    diff = set(differentiable_inputs(op, library))
    outputs = differentiable_outputs(op, library)
    if not diff or not any(outputs):
        return False
    # An in-place op differentiates through its functional variant, whose formulas are its own.
    formulas_of = differentiated_through(op, library) or op
    written = [a.name for a in op.schema.mutable_arguments]
    written_out = written_outputs(op, library)
    spec = gradcheck_spec(case)
    named = make_named(op, case.sample, seed=case.seed, dtype=getattr(torch, spec.dtype or
                                                                      "float64"))
    named = _require_grad(case, named, diff)
    leaves = [t for t in _flat_tensors(list(named.values())) if t.requires_grad]
    if not leaves:
        return False
    overload = case.overload

    def rebuild(flat: tuple[torch.Tensor, ...]) -> dict[str, Any]:
        it = iter(flat)

        def put(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.requires_grad:
                return next(it)
            if isinstance(x, list):
                return [put(v) for v in x]
            return x
        return {k: put(v) for k, v in named.items()}

    def fn(*flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        named_now = rebuild(flat)
        # gradcheck's inputs are leaves, which an in-place op may not write: it writes copies.
        named_now.update({n: _cloned(named_now[n]) for n in written if n in named_now})
        a, k = split_call(op, named_now)
        # gradcheck compares calls with each other: a random op draws the same numbers in each.
        with _reseeded(op, case.seed):
            out = overload(*a, **k)
        out = [named_now[n] for n in written] if written_out else _returns(op, out)
        return tuple(t for r, keep in zip(out, outputs) if keep
                     for t in _flat_tensors(r) if t.is_floating_point() or t.is_complex())

    tolerances = {k: getattr(spec, k) for k in ("atol", "rtol", "eps")
                  if getattr(spec, k) is not None}
    with warnings.catch_warnings():
        # gradcheck warns about inputs that are not float64; `gradcheck: {dtype: ...}` chose them.
        warnings.filterwarnings("ignore", "Input #", UserWarning)
        torch.autograd.gradcheck(fn, tuple(leaves), **tolerances)
        missing, not_implemented = _second_order_callees(formulas_of)
        if _composite_implicit(op):
            # Differentiated through what it calls: their second order is its own.
            for callee in _library_callees(op, fn, leaves):
                m, n = _second_order_callees(callee)
                missing += [x for x in m if x not in missing]
                not_implemented += [x for x in n if x not in not_implemented]
                if str(callee.name) in _NOT_IMPLEMENTED:
                    not_implemented.append(str(callee.name))
        if second_order is None:
            # A formula reading an output as a constant (constant-in-backward) makes the op
            # differentiable once, as a callee without gradients does.
            second_order = not missing and not constant_reads_of(formulas_of, lambda ref: False)
        if not second_order and _check_second_order_error(fn, leaves, op, missing):
            return True
        try:
            torch.autograd.gradgradcheck(fn, tuple(leaves), **tolerances)
        except NotImplementedError as e:
            # A second derivative the op file declares `not_implemented` says so clearly.
            if not any(n in str(e) for n in not_implemented):
                raise
    return True


def gradcheck_spec(case: Case) -> GradcheckSpec:
    """The gradient check's dtype and tolerances: the sample's `gradcheck:` over the op's."""
    merged = {}
    for spec in (case.op.gradcheck, case.sample.gradcheck):
        if spec is not None:
            merged.update({k: getattr(spec, k) for k in ("dtype", "atol", "rtol", "eps")
                           if getattr(spec, k) is not None})
    return GradcheckSpec(**merged)


def _second_order_callees(op: Op) -> tuple[list[str], list[str]]:
    """The library ops the formulas call that have no gradients at all (the op can then be
    differentiated once only), and those with `not_implemented` ones (a second derivative may
    raise their error)."""
    from codegen.formulas import Derivatives, library_calls

    d = op.derivatives
    if not isinstance(d, Derivatives):
        return [], []
    missing, partial = [], []
    for ref in library_calls(d):
        overload = _overload(ref)
        name = f"{ref.namespace}::{ref.name}"
        if not _op_differentiable(overload):
            missing.append(name)
        elif _has_not_implemented(overload):
            partial.append(name)
    return missing, partial


def _library_callees(op: Op, fn: Callable[..., Any], leaves: list[torch.Tensor]) -> list[Op]:
    """The ops of the loaded op libraries that a run of `fn` (a call of `op`) dispatches to,
    below the CompositeImplicitAutograd kernel of `op`, in the order first called."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[Op] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            callee = _LIBRARY_OPS.get(_op_name(func))
            if callee is not None and callee is not op and callee not in seen:
                seen.append(callee)
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Record():
        fn(*[t.detach() for t in leaves])
    return seen


def _op_name(overload: Any) -> str:
    """`ns::name` or `ns::name.overload`, as an op file names it."""
    name = overload.name() if isinstance(overload, torch._ops.OpOverload) else ""
    return name.removesuffix(".default")


def _overload(ref: Any) -> torch._ops.OpOverload:
    """The overload of an op's name or of a formula's reference to one."""
    packet = getattr(getattr(torch.ops, ref.namespace), ref.name)
    return getattr(packet, ref.overload or "default")


def _op_differentiable(overload: torch._ops.OpOverload) -> bool:
    """Whether a library op a formula calls has autograd (derivatives or a composite kernel). An
    op of a loaded op file says so itself: one without derivatives has an Autograd kernel too,
    which raises at backward (Note [C++ autograd])."""
    op = _LIBRARY_OPS.get(overload.name().removesuffix(".default"))
    if op is not None:
        return op.derivatives is not None or _composite_implicit(op)
    return overload.has_kernel_for_dispatch_key(torch._C.DispatchKey.Autograd) or \
        overload.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd)


# Ops of the libraries this process loaded whose derivative formulas hold `not_implemented`, and
# every op of them by name: filled by `note_library` (load_cases, load_python_library, Failures).
_NOT_IMPLEMENTED: set[str] = set()
_LIBRARY_OPS: dict[str, Op] = {}


def _has_not_implemented(overload: torch._ops.OpOverload) -> bool:
    return overload.name() in _NOT_IMPLEMENTED or \
        overload.name().removesuffix(".default") in _NOT_IMPLEMENTED


def note_library(ops: Iterable[Op]) -> None:
    """Record which ops have `not_implemented` gradients (the second-order expectation of the ops
    whose formulas call them)."""
    from codegen.formulas import Derivatives

    for op in ops:
        _LIBRARY_OPS[str(op.name)] = op
        d = op.derivatives
        if isinstance(d, Derivatives) and any(set(f.inputs) - set(implemented_inputs(f))
                                              for f in d.formulas):
            _NOT_IMPLEMENTED.add(str(op.name))


def _check_second_order_error(fn: Any, leaves: list[torch.Tensor], op: Op,
                              callees: list[str]) -> bool:
    """That a second backward raises naming the op or a callee without gradients; False where
    it ran, and gradgradcheck must then pass: a C++ backward's callee with torch's
    not-implemented kernel raises only where a gradient flows into it (not into one that
    computes indices)."""
    outs = [t for t in fn(*leaves) if t.requires_grad]
    # The incoming gradients are differentiated too, as gradgradcheck does: a backward linear in
    # them (a formula calling an op on `grad` alone) reaches its callee through them only.
    cotangents = [torch.ones_like(t, requires_grad=True) for t in outs]
    grads = torch.autograd.grad(outs, leaves, cotangents, create_graph=True, allow_unused=True)
    total = torch.stack([g.sum() for g in grads if g is not None]).sum()
    try:
        torch.autograd.grad(total, leaves + cotangents, allow_unused=True)
    except RuntimeError as e:
        if not any(n in str(e) for n in [str(op.name), *callees]):
            raise AssertionError(f"second backward of {op.name} failed without naming the op: "
                                 f"{e}") from e
        return True
    return False


def check_seeded(case: Case) -> int:
    """A random op draws from the generator it is given, and only from it: with the same seed
    the same outputs, whatever torch's global generator holds; another seed gives other outputs.
    Without a `Generator?` argument (a `nondeterministic_seeded` op), reseeding torch's
    generator gives the same outputs. Returns the number of comparisons made."""
    op = case.op
    gens = generator_arguments(op)
    overload = case.overload

    def run(global_seed: int, seed: int | None) -> Any:
        named = make_named(op, case.sample, seed=case.seed)
        if seed is not None:
            for g in gens:
                named[g] = torch.Generator().manual_seed(seed)
        a, k = split_call(op, named)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(global_seed)
            return _detach(overload(*a, **k))

    _assert_same(run(1, None), run(1, None),
                 f"{case.id} run twice after the same torch.manual_seed")
    if not gens:
        return 1
    first = run(1, 7)
    _assert_same(run(2, 7), first, f"{case.id} with a Generator seeded alike, but another "
                 "global seed (does the kernel use the global generator?)")
    other = run(1, 8)
    same = [torch.equal(x, y) for x, y in zip(_flat_tensors(first), _flat_tensors(other))]
    assert not all(same), (f"{case.id}: Generators seeded differently gave the same outputs (does "
                           "the kernel ignore its generator, or draw nothing on this sample?)")
    return 3


def check_vmap(case: Case, *, batch: int = 3) -> int:
    """`torch.vmap` of the op (its batching rule) equals calling it on each batch element:
    every Tensor argument (keyword-only ones too) batched at dim 0, then only the first one
    batched at its last dim, then (with several) every one but the first batched at dim 0; for
    an op that writes to its arguments, the written ones too (each batched whenever another
    argument is: vmap cannot write a batch into one shared Tensor). Returns the number of
    configurations checked."""
    op = case.op
    overload = case.overload
    samples = [make_inputs(op, case.sample, seed=case.seed + i) for i in range(batch)]
    # Every argument in one list, those passed by name last, so vmap batches them all.
    n, keys = len(samples[0][0]), list(samples[0][1])
    names = [a.name for a in op.schema.arguments[:n]] + keys
    values = [[*args, *(kwargs[k] for k in keys)] for args, kwargs in samples]

    def call(operands: Sequence[Any]) -> Any:
        return overload(*operands[:n], **dict(zip(keys, operands[n:])))

    first = values[0]
    tensor_at = [i for i, a in enumerate(first) if isinstance(a, torch.Tensor)]
    assert tensor_at, f"{case.id}: the sample passes no Tensor to batch"
    writes = {a.name for a in op.schema.mutable_arguments}
    written = [i for i, name in enumerate(names) if name in writes and first[i] is not None]
    unbatched = [names[i] for i in written if i not in tensor_at]
    assert not unbatched, (f"{case.id}: the op writes to '{unbatched[0]}', which the check "
                           "cannot batch: pass it a Tensor")
    configs = [{i: 0 for i in tensor_at}, {tensor_at[0]: -1}]
    if len(tensor_at) > 1:
        # An unbatched first operand (a shared input under vmap over another one).
        configs.append({i: 0 for i in tensor_at[1:]})
    configs = [dims for dims in configs if all(i in dims for i in written)]
    out_dims = 0 if op.schema.returns else None
    for dims in configs:
        def element(b: int) -> list:
            # copies: the op may write to them
            return [_clone(values[b][i]) if i in dims else first[i] for i in range(len(first))]
        inputs = [element(b) for b in range(batch)]
        batched = [torch.stack([inputs[b][i] for b in range(batch)], dim=dims[i])
                   if i in dims else first[i] for i in range(len(first))]
        in_dims = tuple(dims.get(i) for i in range(len(first)))
        actual = torch.vmap(lambda *a: call(a), in_dims=in_dims, out_dims=out_dims)(*batched)
        inputs = [element(b) for b in range(batch)]
        each = [call(inputs[b]) for b in range(batch)]
        expected = _stacked(each, f"{case.id} under vmap, in_dims={in_dims}")
        _assert_same(actual, expected, f"{case.id} under vmap, in_dims={in_dims}")
        for i in written:
            _assert_same(batched[i], torch.stack([inputs[b][i] for b in range(batch)], dim=dims[i]),
                         f"{case.id} under vmap, in_dims={in_dims}: '{names[i]}' written")
    return len(configs)


def _stacked(each: list[Any], what: str) -> Any:
    """The outputs of a loop over a batch as vmap returns them: Tensors stacked at dim 0, lists
    and tuples (`(Tensor[], Tensor)`) element by element; None stays None."""
    first = each[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(each)
    if isinstance(first, (list, tuple)):
        lengths = {len(e) for e in each}
        assert len(lengths) == 1, f"{what}: the loop's outputs have lengths {sorted(lengths)}"
        return type(first)(_stacked([e[k] for e in each], f"{what} [{k}]")
                           for k in range(len(first)))
    assert first is None, f"{what}: the op returned {type(first).__name__}, not a Tensor"
    return None


def check_autocast(case: Case) -> torch.dtype:
    """Under `torch.autocast` of the op's device type, floating Tensor inputs are cast to the
    policy's dtype before the op runs: its floating outputs have that dtype. Returns it."""
    spec = case.op.autocast
    assert spec is not None, f"{case.id}: the op declares no autocast policy"
    if spec.cast_inputs == AUTOCAST_DTYPE:
        # The dtype autocast is given, whichever: run under two.
        runs = [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16)]
    else:
        runs = [(torch.bfloat16, getattr(torch, spec.cast_inputs))]
    for autocast_dtype, target in runs:
        # Inputs of another floating dtype than the policy's, so that the cast shows.
        given = torch.float32 if target != torch.float32 else torch.bfloat16
        args, kwargs = case.inputs(dtype=given, device=spec.device_type)
        with torch.autocast(spec.device_type, dtype=autocast_dtype):
            out = case.overload(*_detach(args), **_detach(kwargs))
        floating = [t for t in _flat_tensors(out) if t.is_floating_point()]
        assert floating, f"{case.id}: no floating output to check the cast on"
        assert all(t.dtype == target for t in floating), (
            f"{case.id}: under autocast to {autocast_dtype}, outputs are "
            f"{[t.dtype for t in floating]}, expected {target}")
    return target


def _mark_dynamic(case: Case, named: Mapping[str, Any], symbolic: set[str],
                  moving: Mapping[tuple, set[int]]) -> None:
    """Mark dynamic exactly the tensor dims the sample names with a symbolic size, and the dims
    of the ops' outputs it takes that move with them (`moving`, from `_moving_dims`)."""
    from torch._dynamo import mark_dynamic

    def visit(raw: Any, value: Any, at: tuple) -> None:
        if isinstance(raw, TensorSample) and isinstance(value, torch.Tensor):
            for i, d in enumerate(raw.shape):
                if isinstance(d, SymDim) and d.name in symbolic:
                    mark_dynamic(value, i)
        elif isinstance(raw, OpOutput) and isinstance(value, torch.Tensor):
            for i in sorted(moving.get(at, ())):
                mark_dynamic(value, i)
        elif isinstance(raw, tuple) and isinstance(value, list):
            for k, (r, v) in enumerate(zip(raw, value)):
                visit(r, v, at + (k,))

    given = dict(case.sample.args)
    for name, value in named.items():
        visit(given.get(name), value, (name,))


def _moving_dims(case: Case, each: list[Mapping[str, Any]]) -> dict[tuple, set[int]]:
    """The dims of each op output the sample takes (by argument name, then list position) whose
    size differs between the sample's inputs at the compile check's sizes (`each`). Such a dim
    is at least 2 at every size: torch.compile specializes 0 and 1, as it does a named size's."""
    out: dict[tuple, set[int]] = {}

    def visit(raw: Any, values: list[Any], at: tuple) -> None:
        if isinstance(raw, OpOutput) and all(isinstance(v, torch.Tensor) for v in values):
            shapes = [v.shape for v in values]
            if len({len(s) for s in shapes}) == 1:
                out[at] = {i for i in range(len(shapes[0])) if len({s[i] for s in shapes}) > 1}
                for i in sorted(out[at]):
                    assert min(s[i] for s in shapes) >= 2, (
                        f"{case.id}: dim {i} of '{at[0]}'{''.join(f'[{k}]' for k in at[1:])} "
                        f"(the output of {raw.schema.name}) is "
                        f"{', '.join(str(s[i]) for s in shapes)} at the compile check's sizes: "
                        "it moves with the named sizes, and torch.compile specializes a size of "
                        "0 or 1; give the named sizes values that make it at least 2")
        elif isinstance(raw, tuple) and all(isinstance(v, list) for v in values):
            for k, r in enumerate(raw):
                visit(r, [v[k] for v in values if k < len(v)], at + (k,))

    for name, raw in case.sample.args:
        visit(raw, [named.get(name) for named in each], (name,))
    return out


def _size_slots(raw: Any, value: Any, symbolic: set[str], sizes: Mapping[str, Any]) -> Any:
    """`value` with each int the sample gives as a symbolic named size replaced by `sizes[name]`."""
    if isinstance(raw, SymDim) and raw.name in symbolic:
        return sizes[raw.name]
    if isinstance(raw, tuple) and isinstance(value, list):
        return [_size_slots(r, v, symbolic, sizes) for r, v in zip(raw, value)]
    return value


def default_backend() -> str:
    """The compile check's backend: inductor, which `torch.compile` users get, where it can
    compile (a C++ compiler for CPU code is found); `aot_eager` (no code generated) elsewhere."""
    try:
        from torch._inductor import cpp_builder

        cpp_builder.get_cpp_compiler()
    except Exception:   # no compiler, or an inductor without this function: cannot tell
        return "aot_eager"
    return "inductor"


def check_compile(case: Case, *, backend: str | None = None,
                  scales: Iterable[int] = COMPILE_SCALES) -> int:
    """`torch.compile(fullgraph=True)` of a call of the op: no graph break, one compilation for
    every size the sample lets vary, results and mutated arguments equal to eager's. The backend
    is `default_backend()` unless given.

    Exactly the sample's symbolic named sizes (`symbolic_dims`) are dynamic: their tensor dims are
    marked dynamic, and `SymInt` arguments given such a size receive it as a SymInt. Each is
    multiplied by each of `scales` (all together, so sizes that move together stay together);
    everything else stays as written, and sizes are not duck-typed (two sizes equal by chance
    are not assumed equal). Returns the number of sizes run (1 when nothing varies)."""
    import torch._dynamo
    import torch.fx.experimental._config as fx_config
    from torch._dynamo.utils import counters

    op = case.op
    overload = case.overload
    symbolic = set(symbolic_dims(case))
    names = sorted(symbolic)
    given = dict(case.sample.args)
    base = dict(case.sample.dims)
    scales = tuple(scales) if symbolic else (1,)

    def call(carriers: list[torch.Tensor], named: dict[str, Any]) -> Any:
        # SymInt arguments tied to a symbolic size read it off a carrier tensor's dynamic dim.
        sizes = {n: c.size(0) for n, c in zip(names, carriers)}
        filled = {k: _size_slots(given.get(k), v, symbolic, sizes) for k, v in named.items()}
        a, k = split_call(op, filled)
        out = overload(*a, **k)
        # The outputs' sizes as the graph knows them (from the fake kernel), to compare with the
        # real ones: the results alone would pass a wrong fake, as nothing here reads its sizes.
        return out, [t.size() for t in _flat_tensors(out)]

    torch._dynamo.reset()
    graphs_before = counters["stats"]["unique_graphs"]
    compiled = torch.compile(call, backend=backend or default_backend(), fullgraph=True)
    n = 0
    dynamic_output = has_dynamic_output(op)
    config = {"capture_dynamic_output_shape_ops": dynamic_output,
              "capture_scalar_outputs": dynamic_output, "error_on_recompile": True}
    # Compiled for real, not served from torch's caches: their keys do not cover a custom op's
    # fake kernel or tags, so a cache warmed before an edit would hide what the edit broke.
    # (torch.compiler.config.force_disable_caches would also warn that it turns off dynamo_pgo.)
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with torch._dynamo.config.patch(config), \
            inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False), \
            functorch_config.patch(enable_autograd_cache=False,
                                   enable_remote_autograd_cache=False), \
            fx_config.patch(use_duck_shape=False):  # type: ignore[attr-defined]
        at_scales = [{k: v * scale if k in symbolic else v for k, v in base.items()}
                     for scale in scales]
        made = [make_named(op, case.sample, seed=case.seed, sizes=sizes) for sizes in at_scales]
        moving = _moving_dims(case, made)
        for scale, sizes, named in zip(scales, at_scales, made):
            eager_named = _clone(named)
            try:
                with _reseeded(op, case.seed):
                    a, k = split_call(op, eager_named)
                    expected = overload(*a, **k)
                _mark_dynamic(case, named, symbolic, moving)
                carriers = [torch.empty(sizes[name]) for name in names]
                for c in carriers:
                    torch._dynamo.mark_dynamic(c, 0)
                # The sizes reach the graph through the carriers only: the same constant here.
                slots = {k: _size_slots(given.get(k), v, symbolic, dict.fromkeys(names, 0))
                         for k, v in named.items()}
                with _reseeded(op, case.seed):
                    actual, traced = compiled(carriers, slots)
            except Exception as e:
                if scale != 1 or type(e).__name__ == "ConstraintViolationError":
                    # Torch's message names neither the sample nor its sizes (`L['named']...`).
                    e.add_note(_varied_sizes_note(case, names, sizes, scale))
                raise
            what = f"{case.id} compiled at sizes {sizes}" if sizes else f"{case.id} compiled"
            real = [tuple(t.shape) for t in _flat_tensors(actual)]
            assert [tuple(int(d) for d in s) for s in traced] == real, (
                f"{what}: the fake kernel gives output sizes {[tuple(s) for s in traced]}, the "
                f"kernel {real}")
            _assert_same(actual, expected, what)
            _assert_same(_mutated(op, slots), _mutated(op, eager_named),
                         f"{what}: mutated arguments")
            n += 1
    graphs = counters["stats"]["unique_graphs"] - graphs_before
    assert graphs == 1, f"{case.id}: compiled {graphs} graphs for {n} sizes"
    return n


def _varied_sizes_note(case: Case, names: list[str], sizes: Mapping[str, int],
                       scale: int) -> str:
    varied = ", ".join(f"{n}={sizes[n]}" for n in names)
    at = f"{case.sample.loc.path}:{case.sample.loc.line}"
    return (f"{at}: {case.id} ran with its named sizes varied ({varied}, {scale} times the "
            "sample's) and dynamic: a named size must be free to vary together with the others; "
            "where the kernel ties it to a size written as a number or to a tensor given by "
            "`values`, write it as a number (docs/FORMAT.md, Named sizes)")


def check_export(case: Case) -> None:
    """`torch.export.export` of a module calling the op (decomposed to the functional IR when the
    op mutates), saved and loaded back, gives eager's results (with the fake kernel's sizes) and
    mutates the arguments as eager does. Tensors (and Tensor lists) are the
    program's inputs; other arguments are constants."""
    op = case.op
    overload = case.overload
    named = make_named(op, case.sample, seed=case.seed)
    tensor_keys = [k for k, v in named.items() if _is_tensor_arg(v)]

    class Call(torch.nn.Module):
        def forward(self, *tensors: Any) -> Any:
            values = dict(named)
            values.update(zip(tensor_keys, tensors))
            a, k = split_call(op, values)
            return overload(*a, **k)

    def tensors_of(values: Mapping[str, Any]) -> tuple:
        return tuple(_detach(values[k]) for k in tensor_keys)

    with _reseeded(op, case.seed):
        program = torch.export.export(Call(), _clone(tensors_of(named)))
        if is_mutating(op):
            # Export keeps a mutating op as it is; the functional IR that deployment
            # (AOTInductor) runs has it through its functionalization, which is what can differ.
            program = program.run_decompositions()
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    buffer.seek(0)
    loaded = torch.export.load(buffer)
    fresh = _detach(make_named(op, case.sample, seed=case.seed))
    eager = _clone(fresh)
    with _reseeded(op, case.seed):
        a, k = split_call(op, eager)
        expected = overload(*a, **k)
    with _reseeded(op, case.seed):
        actual = loaded.module()(*tensors_of(fresh))
    _assert_same(actual, expected, f"{case.id} after export, save and load")
    output = next(n for n in loaded.graph.nodes if n.op == "output")
    traced = [tuple(n.meta["val"].shape) for n in torch.utils._pytree.tree_leaves(output.args)
              if isinstance(n, torch.fx.Node) and isinstance(n.meta.get("val"), torch.Tensor)]
    # The user outputs come last (after mutated inputs written back).
    real = [tuple(t.shape) for t in _flat_tensors(actual)]
    assert not real or _sizes_agree(traced[-len(real):], real), (
        f"{case.id} exported: the fake kernel gives output sizes {traced}, the kernel {real}")
    _assert_same(_mutated(op, fresh), _mutated(op, eager),
                 f"{case.id} after export, save and load: mutated arguments")


def _sizes_agree(traced: list[tuple], real: list[tuple]) -> bool:
    """Traced output sizes equal the real ones; a data-dependent size (a SymInt) equals any."""
    return len(traced) == len(real) and all(
        len(t) == len(r) and all(not isinstance(a, int) or a == b for a, b in zip(t, r))
        for t, r in zip(traced, real))


def _is_tensor_arg(v: Any) -> bool:
    return isinstance(v, torch.Tensor) or (
        isinstance(v, list) and bool(v) and all(isinstance(t, torch.Tensor) for t in v))


# --------------------------------------------------------------------------------------------------
# Devices


def devices(op: Op) -> list[str]:
    """The devices the library has kernels of `op` for that this process can run: the CPU when
    it has a CPU (or composite) kernel, CUDA when it has a CUDA kernel and a GPU is present (a
    composite op on CUDA runs torch's kernels, not the library's)."""
    return [d for d in kernel_devices(op) if d != "cuda" or torch.cuda.is_available()]


def check_devices(case: Case) -> list[str]:
    """The sample on every device of `devices(op)` gives the CPU's results (and leaves the
    mutated arguments as the CPU run does), within the dtype's tolerance. Returns the devices."""
    where = devices(case.op)
    results = {}
    for device in where:
        named = make_named(case.op, case.sample, seed=case.seed)
        named = {k: _to(v, device) for k, v in named.items()}
        args, kwargs = split_call(case.op, named)
        with torch.no_grad():
            out = case.overload(*args, **kwargs)
        results[device] = (_to(out, "cpu"), _to(_mutated(case.op, named), "cpu"))
    first = where[0]
    for device in where[1:]:
        _assert_same(results[device][0], results[first][0], f"result on {device} vs {first}")
        _assert_same(results[device][1], results[first][1],
                     f"mutated arguments on {device} vs {first}")
    return where


def _to(x: Any, device: str) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    if isinstance(x, torch.device) and x.type != device:
        return torch.device(device)
    return x


def check_cudagraph(case: Case) -> int:
    """The op's CUDA kernel captured in a CUDA graph and replayed gives the eager results: it
    launches on torch's current stream (capture fails on another) and does not synchronize.
    Ops tagged `cudagraph_unsafe` are not checked. Returns the number of replays."""
    named = make_named(case.op, case.sample, seed=case.seed)
    named = {k: _to(v, "cuda") for k, v in named.items()}
    eager_named = _clone(named)
    args, kwargs = split_call(case.op, eager_named)
    with torch.no_grad():
        expected = case.overload(*args, **kwargs)
    expected_mutated = _mutated(case.op, eager_named)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():      # warm-up, off the capture
        warm = _clone(named)
        a, k = split_call(case.op, warm)
        case.overload(*a, **k)
    torch.cuda.current_stream().wait_stream(side)
    static = _clone(named)
    graph = torch.cuda.CUDAGraph()
    a, k = split_call(case.op, static)
    with torch.cuda.graph(graph), torch.no_grad():
        out = case.overload(*a, **k)
    graph.replay()
    torch.cuda.synchronize()
    _assert_same(out, expected, "result after CUDA-graph replay")
    _assert_same(_mutated(case.op, static), expected_mutated,
                 "mutated arguments after CUDA-graph replay")
    return 1


_RUN: dict[str, Callable[..., Any]] = {
    "opcheck": check_opcheck, "gradients": check_gradients, "compile": check_compile,
    "export": check_export, "seeded": check_seeded, "vmap": check_vmap, "autocast": check_autocast,
    "devices": check_devices, "cudagraph": check_cudagraph}


def check(case: Case, name: str, **options: Any) -> Any:
    """Run the check called `name` (one of CHECKS) on `case`."""
    if name not in _RUN:
        raise ValueError(f"unknown check {name!r}; checks: {', '.join(CHECKS)}")
    return _RUN[name](case, **options)


# --------------------------------------------------------------------------------------------------
# Known failures


@dataclass
class Failures:
    """A library's known failures: `<op>[<sample>]: {<check>: <reason>}`, read from the
    `sample_failures.yaml` beside its op files (`load_failures`)."""

    entries: dict[str, dict[str, str]] = field(default_factory=dict)
    # Where each entry is (path:line:col), for the "no longer fails" report.
    where: dict[tuple[str, str], str] = field(default_factory=dict)

    def reason(self, case_id: str, check: str) -> str | None:
        return self.entries.get(case_id, {}).get(check)


class NoLongerFails(AssertionError):
    """A check listed as a known failure passed: its entry is to be removed."""


def load_failures(paths: OpPaths, cases: Iterable[Case] | None = None) -> Failures:
    """The known failures of the library whose op files are `paths`: every `sample_failures.yaml`
    in their directories (a directory's own, a file's directory's). Entries must name a sample of
    `cases` (when given), one of CHECKS that the sample has, and a reason; raises UserError with
    every problem (under pytest, also a failure shown without a traceback)."""
    cases = list(cases) if cases is not None else None
    if cases is not None:
        note_library({c.op for c in cases})
    diags = Diagnostics()
    samples = None if cases is None else {c.id: (c.op, c.sample) for c in cases}
    library = list(_LIBRARY_OPS.values())
    entries, where = read_failures(failures_files(_op_paths(paths, "load_failures")), diags,
                                   samples, library)
    with _user_errors():
        diags.raise_if_errors()
    if diags.items:         # entries for checks the suite skips: not needed
        warnings.warn(SampleFailuresWarning(diags.render()), stacklevel=2)
    return Failures(entries, where)


class SampleFailuresWarning(UserWarning):
    """A failures file lists what needs no entry (`check` says the same)."""


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    """Under pytest, a UserError (a broken op file or failures file) is also pytest's failure
    without a traceback, so that a suite loading one shows the located diagnostics alone."""
    try:
        yield
    except UserError as e:
        pytest = sys.modules.get("pytest")
        if pytest is None or isinstance(e, pytest.fail.Exception):
            raise
        raise _pytest_error(pytest)(e.diags) from None


def _pytest_error(pytest: types.ModuleType) -> type:
    global _PYTEST_ERROR
    if _PYTEST_ERROR is None:
        class SampleFilesError(UserError, pytest.fail.Exception):  # type: ignore[misc,name-defined]
            """A UserError that pytest reports as its message alone."""

            def __init__(self, diags: Diagnostics) -> None:
                UserError.__init__(self, diags)
                self.msg, self.pytrace = self.args[0], False

            def __str__(self) -> str:
                return str(self.args[0])

        SampleFilesError.__module__ = __name__
        SampleFilesError.__qualname__ = "SampleFilesError"
        _PYTEST_ERROR = SampleFilesError
    return _PYTEST_ERROR


_PYTEST_ERROR: type | None = None


def run_check(case: Case, name: str, failures: Failures | None = None,
              **options: Any) -> str | None:
    """`check(case, name)` through the known failures: None when it passed; the reason when it
    failed as the failures file says it does. A check that fails unlisted raises its error; a
    listed one that passes raises NoLongerFails, saying which entry to remove."""
    reason = failures.reason(case.id, name) if failures is not None else None
    if reason is None:
        check(case, name, **options)
        return None
    try:
        check(case, name, **options)
    except Exception:
        return reason
    where = failures.where.get((case.id, name), "") if failures is not None else ""
    # An entry written when opcheck ran the utilities torch cannot pass on the op.
    fewer = opcheck_skipped(case) if name == "opcheck" and "test_utils" not in options else None
    raise NoLongerFails(f"{where + ': ' if where else ''}{case.id} passes its {name} check now"
                        f"{f' ({fewer})' if fewer else ''}, but it is listed as a known failure "
                        f"({reason}); remove the entry")
