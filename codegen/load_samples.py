"""Samples of op files (docs/FORMAT.md, "Samples") -> `Sample` records: tensors with named sizes,
scalars, lists and enums, each checked against its argument's type, every problem located.

The stage of loading after YAML with locations (codegen.yaml_source), below the op-entry decoder
(codegen.load), which reads an op's `samples:` with it.
"""

from __future__ import annotations

import re
from typing import Any

from codegen import enums
from codegen.diagnostics import Diagnostics, Loc, closest
from codegen.model import (BaseTy, BaseType, FunctionSchema, ListType, OpOutput, OptionalType,
                           Sample, SampleValue, SymDim, TensorSample, Type)
from codegen.yaml_source import (Map, Node, Scalar, Seq, YamlFile, number_hint, short,
                                  suggest)

TENSOR_SAMPLE_KEYS = ("shape", "values", "dtype", "requires_grad", "low", "high")
OP_OUTPUT_KEYS = ("output_of", "args", "output")

# torch dtype names a sample or autocast spec may use (codegen.enums.DTYPE_NAMES; tests/test_load.py
# checks each is a torch.dtype).
DTYPES = frozenset(enums.DTYPE_NAMES)
FLOAT_DTYPES = enums.names_of("float16", "bfloat16", "float32", "float64")
COMPLEX_DTYPES = enums.names_of("complex32", "complex64", "complex128")

# A named size in a sample: `N` (its value given elsewhere in the sample) or `N=6`.
_DIM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\s*=\s*(-?[0-9]+))?\Z")
DIM_HINT = "a size is an integer, or a named size: N (symbolic), N=6 (with its value)"

_BAD = object()


class _SameCall:
    """`{output_of: <op>, output: <i>}` without `args:`, in a sample that calls the op with
    arguments elsewhere: one call, whose arguments the sample's other `output_of` gives (the five
    CSR tensors torch-harmonics' preprocessed psi makes, each passed on its own)."""

    def __init__(self, schema: FunctionSchema, index: int, node: Node) -> None:
        self.schema, self.index, self.node = schema, index, node


# The values an integer tensor sample's dtype holds: torch.tensor refuses `values` outside them,
# and torch.randint bounds outside them.
_INT_RANGES = {f"int{b}": (-2**(b - 1), 2**(b - 1) - 1) for b in (8, 16, 32, 64)} | {
    f"uint{b}": (0, 2**b - 1) for b in (8, 16, 32, 64)}


_ENUM_SAMPLES = {
    BaseTy.Layout: frozenset({"strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr",
                              "sparse_bsc", "jagged"}),
    BaseTy.MemoryFormat: frozenset({"contiguous_format", "preserve_format", "channels_last",
                                    "channels_last_3d"}),
}


class SampleReader(YamlFile):
    """Decodes samples; `dims`/`dim_uses` hold the named sizes of the sample being read."""

    def __init__(self, path: str, diags: Diagnostics) -> None:
        super().__init__(path, diags)
        # The sample being read: named size -> (value, where given), and the uses of each.
        self.dims: dict[str, tuple[int, Node]] = {}
        self.dim_uses: list[tuple[str, Node]] = []
        # The schemas of the file's ops, which a sample's `output_of:` may name, by each name
        # it may give (`pack`, `pack.out`, `ns::pack`; `add_file_op`).
        self.file_ops: dict[str, FunctionSchema] = {}
        # The sample's `output_of`s written without `args:` (see _SameCall).
        self.same_calls: list[_SameCall] = []

    def dtype(self, node: Node, what: str) -> str | None:
        text = self.string(node, what)
        if text is None:
            return None
        name = text[len("torch."):] if text.startswith("torch.") else text
        if name not in DTYPES:
            self.error(node, f"unknown dtype '{short(text)}'",
                       suggest(name, DTYPES) or "for example float32, int64 or bool")
            return None
        return name

    # -- samples -----------------------------------------------------------------------------------

    def samples(self, node: Node, schema: FunctionSchema) -> tuple[Sample, ...]:
        named: list[tuple[str | None, Node]] = []
        if type(node) is Map:
            fields = self.mapping(node, "'samples'", None) or {}
            # A key naming an argument is one sample left out of its list, unless its value is
            # itself a sample (a mapping of argument names): then it is a sample's name.
            args = [n for n, (_key, value) in fields.items()
                    if schema.argument(n) is not None and not is_sample(value, schema)]
            if args:
                self.error(fields[args[0]][0], f"'samples' is a list of samples (or a mapping "
                           f"name -> sample), but '{args[0]}' is an argument of {schema.name}",
                           "for a single sample, write samples: [{" + args[0] + ": ...}]")
                return ()
            for name, (_key, value) in fields.items():
                named.append((name, value))
        else:
            items = self.sequence(node, "'samples' (a list, or a mapping name -> sample)")
            named = [(None, item) for item in items or ()]
        out = []
        for name, item in named:
            sample = self.sample(item, schema, name)
            if sample is not None:
                out.append(sample)
        return tuple(out)

    def sample(self, node: Node, schema: FunctionSchema, name: str | None) -> Sample | None:
        fields = self.mapping(node, "a sample", None)
        if fields is None:
            return None
        self.dims, self.dim_uses = {}, []
        self.same_calls = []
        gradcheck = None
        ok = True
        if "gradcheck" in fields and schema.argument("gradcheck") is None:
            # The sample's own gradcheck options (an argument of that name would win).
            gradcheck = self.gradcheck(fields.pop("gradcheck")[1])
            ok = gradcheck is not None
        values = self.arguments(node, fields, schema)
        ok = ok and values is not None
        for dim, use in self.dim_uses:
            if dim not in self.dims:
                self.error(use, f"named size '{dim}' has no value in this sample",
                           f"give it once, where it is used first: {dim}=<size>")
                ok = False
                break
        if not ok or values is None:
            return None
        if self.same_calls:
            values = self.resolve_same_calls(values)
            if values is None:
                return None
        args = tuple((a.name, values[a.name]) for a in schema.arguments if a.name in values)
        dims = tuple((d, v) for d, (v, _) in self.dims.items())
        return Sample(args, self.loc(node), name, dims, gradcheck)

    def resolve_same_calls(self, values: dict[str, SampleValue]
                           ) -> dict[str, SampleValue] | None:
        """`values` with each `output_of` written without `args:` made the sample's call of its
        op that gives them; None (errors reported) where the sample has no such call, or
        several."""
        calls: dict[str, list[tuple]] = {}

        def collect(v: Any) -> None:
            if isinstance(v, OpOutput):
                found = calls.setdefault(str(v.schema.name), [])
                if v.args not in found:
                    found.append(v.args)
                for _, a in v.args:
                    collect(a)
            elif isinstance(v, tuple):
                for item in v:
                    collect(item)

        for v in values.values():
            collect(v)
        ok = True
        for same in self.same_calls:
            name = str(same.schema.name)
            found = calls.get(name, [])
            if not found:
                self.error(same.node, f"{same.schema.name} takes arguments: give them under "
                           "'args:'", "{output_of: " + same.node.value + ", args: {" + ", ".join(
                               f"{a.name}: ..." for a in same.schema.arguments
                               if a.default is None) + "}}, or in another output_of of it in "
                           "this sample, which this one then shares")  # type: ignore[attr-defined]
                ok = False
            elif len(found) > 1:
                self.error(same.node, f"this sample calls {same.schema.name} on {len(found)} "
                           "sets of arguments: say which one with 'args:'")
                ok = False

        def fill(v: Any) -> Any:
            if isinstance(v, _SameCall):
                return OpOutput(v.schema, calls[str(v.schema.name)][0], v.index)
            if isinstance(v, OpOutput):
                return OpOutput(v.schema, tuple((n, fill(a)) for n, a in v.args), v.output)
            if isinstance(v, tuple):
                return tuple(fill(item) for item in v)
            return v

        return {k: fill(v) for k, v in values.items()} if ok else None

    def arguments(self, node: Node, fields: dict, schema: FunctionSchema
                  ) -> dict[str, SampleValue] | None:
        """A sample's `fields` (argument name -> (key, value) nodes) -> argument values for
        `schema`, every argument without a default given; None (errors reported) otherwise."""
        names = [a.name for a in schema.arguments]
        values: dict[str, SampleValue] = {}
        ok = True
        meant: set[str] = set()     # arguments a misspelled name was taken for
        for arg_name, (key, value) in fields.items():
            arg = schema.argument(arg_name)
            if arg is None:
                guess = closest(arg_name, names) if len(arg_name) <= 64 else None
                if guess is not None:
                    meant.add(guess)
                self.error(key, f"sample names '{short(arg_name)}', which is not an argument of "
                           f"{schema.name}", suggest(arg_name, names)
                           or ("arguments: " + ", ".join(names) if names else "it takes none"))
                ok = False
                continue
            v = self.sample_value(value, arg.type, f"'{arg_name}'")
            if v is _BAD:
                ok = False
            else:
                values[arg_name] = v
        # Not the arguments a misspelled name was taken for: "did you mean" said it already.
        missing = [a for a in schema.arguments
                   if a.default is None and a.name not in fields and a.name not in meant]
        if missing:
            # An optional without a default (flash-attn's `Generator? gen_`) is given as null.
            nulls = [a.name for a in missing if isinstance(a.type, OptionalType)]
            self.error(Loc(self.path, node.start.line + 1, node.start.column + 1),
                       "sample gives no value for " + ", ".join(f"'{m.name}'" for m in missing)
                       + (" (no default)" if len(missing) == 1 else " (no defaults)"),
                       "an optional argument takes null: " + ", ".join(f"{m}: null"
                                                                      for m in nulls)
                       if nulls else None)
            ok = False
        return values if ok else None

    def size_name(self, node: Scalar, what: str):
        """`N` or `N=6` where a sample gives a size -> SymDim, or _BAD (error reported)."""
        m = _DIM.match(node.value.strip())
        if m is None:
            self.error(node, f"expected a size for {what}, got '{short(node.value)}'", DIM_HINT)
            return _BAD
        dim = m.group(1)
        if m.group(2) is not None:
            value = int(m.group(2))
            if dim in self.dims:
                first = self.dims[dim][1]
                self.error(node, f"named size '{dim}' is given a value twice in this sample",
                           f"its value is given at line {first.start.line + 1}; write just "
                           f"'{dim}' here")
                return _BAD
            if not 2 <= value < 2**31:
                self.error(node, f"named size '{dim}' is {value}; a named size is between 2 and "
                           "2**31 - 1",
                           "torch.compile specializes sizes 0 and 1 (they cannot vary): write a "
                           "fixed size instead" if 0 <= value < 2 else None)
                return _BAD
            self.dims[dim] = (value, node)
        self.dim_uses.append((dim, node))
        return SymDim(dim)

    def sample_value(self, node: Node, t: Type, what: str):
        """A YAML value for an argument of type `t` -> SampleValue, or _BAD (error reported)."""
        if isinstance(t, OptionalType):
            if type(node) is Scalar and node.tag == "null":
                return None
            return self.sample_value(node, t.elem, what)
        if isinstance(t, ListType):
            if type(node) is not Seq:
                if t.size is not None and type(node) is Scalar and node.tag != "null":
                    # `int[2] x` takes a single int for both elements, as in the schema language.
                    v = self.sample_value(node, t.elem, what)
                    return _BAD if v is _BAD else (v,) * t.size
                self.error(node, f"expected a list for {what} ({t}), got {node.kind}")
                return _BAD
            items = [self.sample_value(i, t.elem, f"an element of {what}")
                     for i in node.items]  # type: ignore[attr-defined]
            if any(i is _BAD for i in items):
                return _BAD
            if t.size is not None and len(items) != t.size:
                self.error(node, f"{what} ({t}) takes {t.size} elements, got {len(items)}")
                return _BAD
            return tuple(items)
        if isinstance(t, BaseType):
            return self.base_sample(node, t.name, what)
        self.error(node, f"samples cannot give a value of type '{t}' ({what})")
        return _BAD

    def base_sample(self, node: Node, ty: BaseTy, what: str):
        tag = node.tag if type(node) is Scalar else None  # type: ignore[attr-defined]
        value = node.value if type(node) is Scalar else None  # type: ignore[attr-defined]
        if ty is BaseTy.Tensor:
            return self.tensor_sample(node, what)
        if ty in (BaseTy.int, BaseTy.SymInt) and tag == "str":
            return self.size_name(node, what)  # type: ignore[arg-type]
        if ty in (BaseTy.int, BaseTy.SymInt, BaseTy.DeviceIndex):
            if tag == "int":
                if not -(2**63) <= value < 2**63:
                    self.error(node, f"{what} does not fit in a 64-bit int")
                    return _BAD
                return value
            return self._sample_type_error(node, "an integer", what)
        if ty is BaseTy.float:
            if tag in ("int", "float"):
                return float(value)
            return self._sample_type_error(node, "a number", what)
        if ty in (BaseTy.bool, BaseTy.SymBool):
            if tag == "bool":
                return value
            return self._sample_type_error(node, "true or false", what)
        if ty is BaseTy.Scalar:
            if tag in ("int", "float", "bool"):
                return value
            return self._sample_type_error(node, "a number or boolean", what)
        if ty is BaseTy.str:
            if tag == "str":
                return value
            return self._sample_type_error(node, "a string", what)
        if ty is BaseTy.ScalarType:
            name = self.dtype(node, what)
            return _BAD if name is None else name
        if ty is BaseTy.Device:
            if tag == "str" and enums.device_string_problem(value) is None:
                return value
            return self._sample_type_error(node, "a device string such as cpu or cuda:0", what)
        if ty in (BaseTy.Layout, BaseTy.MemoryFormat):
            choices = _ENUM_SAMPLES[ty]
            if tag == "str" and value in choices:
                return value
            self.error(node, f"expected a {ty.value} name for {what}",
                       "expected one of: " + ", ".join(sorted(choices)))
            return _BAD
        self.error(node, f"samples cannot give a value of type '{ty.value}' ({what})",
                   "omit the argument if it has a default")
        return _BAD

    def _sample_type_error(self, node: Node, expected: str, what: str):
        self.error(node, f"expected {expected} for {what}, got {node.kind}", number_hint(node))
        return _BAD

    def tensor_sample(self, node: Node, what: str):
        if type(node) is Map and any(type(k) is Scalar and k.value == "output_of"
                                     for k, _ in node.pairs):  # type: ignore[attr-defined]
            return self.op_output(node, what)
        fields = self.mapping(node, f"a tensor sample for {what}", TENSOR_SAMPLE_KEYS)
        if fields is None:
            return _BAD
        ok = True
        if ("shape" in fields) == ("values" in fields):
            if not fields.keys() & {"shape", "values"} and any(
                    type(k) is Scalar and k.tag == "str" and len(k.value) <= 64
                    and k.value not in TENSOR_SAMPLE_KEYS
                    and closest(k.value, ("shape", "values")) is not None
                    for k, _ in node.pairs):   # type: ignore[attr-defined]
                return _BAD     # a misspelled 'shape:' or 'values:', reported as unknown
            self.error(Loc(self.path, node.start.line + 1, node.start.column + 1),
                       f"a tensor sample gives exactly one of 'shape:' or 'values:' ({what})",
                       "{shape: [2, 3]} for random contents, {values: [[1, 2]]} for given ones")
            return _BAD
        shape: tuple[int, ...] = ()
        values = None
        if "shape" in fields:
            items = self.sequence(fields["shape"][1], "'shape'")
            if items is None:
                return _BAD
            dims: list = []
            for item in items:
                if type(item) is Scalar and item.tag == "int" and 0 <= item.value < 2**31:
                    dims.append(item.value)
                elif type(item) is Scalar and item.tag == "str":
                    dim = self.size_name(item, "'shape'")
                    ok = ok and dim is not _BAD
                    dims.append(dim)
                else:
                    self.error(item, f"a shape holds sizes (integers >= 0), got {item.kind}"
                               if not (type(item) is Scalar and item.tag == "int")
                               else "a size must be between 0 and 2**31 - 1")
                    ok = False
            shape = tuple(dims)
        else:
            parsed = self.nested_values(fields["values"][1])
            if parsed is _BAD:
                return _BAD
            values, shape = parsed
        dtype = "float32"
        if "dtype" in fields:
            d = self.dtype(fields["dtype"][1], "'dtype'")
            if d is None:
                ok = False
            else:
                dtype = d
        elif values is not None:
            dtype = _default_dtype(values)
        requires_grad = None        # not said: the checks decide
        if "requires_grad" in fields:
            rg = self.boolean(fields["requires_grad"][1], "'requires_grad'")
            if rg is None:
                ok = False
            else:
                requires_grad = rg
        bounds: list = []
        for key in ("low", "high"):
            if key in fields:
                bound = fields[key][1]
                if type(bound) is Scalar and bound.tag == "str":
                    # A named size: index tensors whose values range over a size.
                    sym = self.size_name(bound, f"'{key}'")  # type: ignore[arg-type]
                    ok = ok and sym is not _BAD
                    bounds.append(sym)
                    continue
                v = self.number(bound, f"'{key}'")
                ok = ok and v is not None
                bounds.append(None if v is None else float(v))
            else:
                bounds.append(None)
        low, high = bounds
        if isinstance(low, float) and isinstance(high, float) and low >= high:
            self.error(fields["low"][1], f"'low' ({low}) must be less than 'high' ({high})")
            ok = False
        elif ok and enums.DTYPE_NAMES[dtype] in _INT_RANGES:
            ok = self._int_range(fields, dtype, low, high)
        if not ok:
            return _BAD
        return TensorSample(shape, dtype, requires_grad, low, high, values)

    def op_output(self, node: Node, what: str):
        """`{output_of: <op>, args: {...}, output: <i>}` -> OpOutput, or _BAD (error reported):
        the output of an op of this file, called on arguments of its own (named sizes are the
        sample's)."""
        fields = self.mapping(node, f"an op's output for {what}", OP_OUTPUT_KEYS)
        if fields is None:
            return _BAD
        name_node = fields["output_of"][1]
        name = self.string(name_node, "'output_of'")
        if name is None:
            return _BAD
        schema = self.file_op(name_node, name)
        if schema is None:
            return _BAD
        returns = schema.returns
        if "output" in fields:
            index_node = fields["output"][1]
            n = len(returns)
            if not (type(index_node) is Scalar and index_node.tag == "int"
                    and 0 <= index_node.value < n):   # type: ignore[attr-defined]
                self.error(index_node, f"'output' of {schema.name} is the index of one of its "
                           f"{n} returns, got {short(str(getattr(index_node, 'value', '')))}"
                           if n else f"{schema.name} returns nothing",
                           f"0 to {n - 1}" if n else None)
                return _BAD
            index = index_node.value  # type: ignore[attr-defined]
        elif not returns:
            self.error(name_node, f"{schema.name} returns nothing")
            return _BAD
        elif len(returns) != 1:
            self.error(name_node, f"{schema.name} returns {len(returns)} values: say which one "
                       f"{what} is", ", ".join(f"output: {i} for " + (f"'{r.name}'" if r.name else
                                                                 f"its {r.type}")
                                              for i, r in enumerate(returns)))
            return _BAD
        else:
            index = 0
        ret = returns[index].type
        if not (isinstance(ret, BaseType) and ret.name is BaseTy.Tensor):
            self.error(fields.get("output", fields["output_of"])[1],
                       f"return {index} of {schema.name} is {ret}, not a Tensor ({what} takes "
                       "one Tensor)")
            return _BAD
        args: dict[str, SampleValue] | None = {}
        if "args" in fields:
            arg_fields = self.mapping(fields["args"][1], f"'args' of {schema.name}", None)
            args = None if arg_fields is None else \
                self.arguments(fields["args"][1], arg_fields, schema)
        elif any(a.default is None for a in schema.arguments):
            same = _SameCall(schema, index, name_node)
            self.same_calls.append(same)
            return same
        if args is None:
            return _BAD
        return OpOutput(schema, tuple((a.name, args[a.name]) for a in schema.arguments
                                      if a.name in args), index)

    def add_file_op(self, schema: FunctionSchema) -> None:
        """Let samples call `schema` (the first op of a name wins, as the file declares it)."""
        n = schema.name
        self.file_ops.setdefault(n.name + (f".{n.overload}" if n.overload else ""), schema)
        self.file_ops.setdefault(str(n), schema)

    def file_op(self, node: Node, name: str) -> FunctionSchema | None:
        """The op of this file that `name` (`pack`, `pack.out`, `ns::pack`) names."""
        schema = self.file_ops.get(name)
        if schema is not None:
            return schema
        names = sorted(k for k in self.file_ops if "::" not in k)
        self.error(node, f"'{short(name)}' is not an op of this file",
                   suggest(name, names) or "a sample takes outputs of the ops of its own op file")
        return None

    def _int_range(self, fields: dict, dtype: str, low, high) -> bool:
        """An integer sample's values, or the [low, high) its random values are drawn from, fit
        its dtype (as the sample checks make them: bounds truncated to integers, default
        [0, 10))."""
        least, most = _INT_RANGES[enums.DTYPE_NAMES[dtype]]
        if "values" in fields:
            bad = _out_of_range(fields["values"][1], least, most)
            if bad is not None:
                self.error(bad, f"{bad.value} is out of the range of {dtype} "  # type: ignore
                           f"({least} to {most})")
                return False
            return True
        if isinstance(low, SymDim) or isinstance(high, SymDim):
            return True
        lo = 0 if low is None else int(low)
        hi = 10 if high is None else int(high)
        if lo < least:
            self.error(fields["low"][1], f"'low' ({lo}) is below the smallest {dtype} ({least})")
            return False
        if hi > most + 1:
            self.error(fields["high"][1], f"'high' ({hi}) is above the largest {dtype} plus one "
                       f"({most + 1}): random values are drawn from [low, high)")
            return False
        if lo >= hi:
            where = fields["high"][1] if "high" in fields else fields["low"][1]
            self.error(where, f"random {dtype} values are drawn from [low, high) = [{lo}, {hi}), "
                       "which holds no integer", "bounds are truncated to integers")
            return False
        return True

    def nested_values(self, node: Node):
        """`values:` -> (nested tuples, shape), checking the nesting is rectangular."""
        if type(node) is Scalar:
            if node.tag in ("int", "float", "bool"):
                return node.value, ()  # type: ignore[attr-defined]
            self.error(node, f"tensor values are numbers or booleans, got {node.kind}",
                       number_hint(node))
            return _BAD
        if type(node) is not Seq:
            self.error(node, f"tensor values are numbers or nested lists, got {node.kind}")
            return _BAD
        parts = [self.nested_values(i) for i in node.items]  # type: ignore[attr-defined]
        if any(p is _BAD for p in parts):
            return _BAD
        shapes = {p[1] for p in parts}
        if len(shapes) > 1:
            self.error(node, "tensor values are not rectangular: rows differ in shape")
            return _BAD
        inner = shapes.pop() if shapes else ()
        return tuple(p[0] for p in parts), (len(parts),) + inner


def _out_of_range(node: Node, least: int, most: int) -> Scalar | None:
    """The first number of a `values:` node outside [least, most] (NaN and infinities are)."""
    if type(node) is Scalar:
        v = node.value  # type: ignore[attr-defined]
        return node if node.tag in ("int", "float") and not least <= v <= most else None
    for item in getattr(node, "items", ()):
        bad = _out_of_range(item, least, most)
        if bad is not None:
            return bad
    return None


def _default_dtype(values) -> str:
    """torch.tensor's dtype for `values`: bool for booleans alone, int64 for integers (with or
    without booleans), else (a float, or no element at all) float32."""
    leaves = list(_leaves(values))
    if leaves and all(isinstance(v, bool) for v in leaves):
        return "bool"
    if leaves and all(isinstance(v, int) for v in leaves):
        return "int64"
    return "float32"


def _leaves(values):
    if isinstance(values, tuple):
        for v in values:
            yield from _leaves(v)
    else:
        yield values


def is_sample(node: Node, schema: FunctionSchema) -> bool:
    """Whether `node` reads as a sample: a non-empty mapping whose keys all name arguments."""
    return type(node) is Map and bool(node.pairs) and all(
        type(k) is Scalar and isinstance(k.value, str) and schema.argument(k.value) is not None
        for k, _ in node.pairs)
