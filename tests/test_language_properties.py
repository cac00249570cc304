"""Property tests of the three small languages (schemas, fake rules, derivative formulas) with
hostile pieces: literals Python's compiler chokes on, control characters, escapes out of range,
numbers beyond int64 and double, deep nesting, escapes from the formula vocabulary.

For every input: `check` and rendering every generated file raise nothing but a located
UserError, and when the op file is accepted, every generated Python file compiles without a
warning. Seeded with the inputs of issue 7; `make fuzz` (HYPOTHESIS_PROFILE=fuzz) runs many more.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from codegen import config
from codegen.__main__ import _check_python_side
from codegen.diagnostics import UserError
from codegen.gen import render
from codegen.load import load_library

FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
# `ts` has no default: torch refuses one on a Tensor[] (`Tensor[] ts=[]`) when the library loads.
SCHEMA = ('ex::f(Tensor self, Tensor other, Tensor[] ts, int n=1, int[] dims=[0], float s=1.0, '
          'str mode="a", bool flag=False, SymInt m=2) -> Tensor')

ATOMS = ["self", "other", "grad", "n", "s", "mode", "flag", "ts", "dims", "m", "torch", "result",
         "0", "1", "0777", "00", "9223372036854775807", "9223372036854775808", "9" * 5000,
         "1e999", "1e-999", "1.5", ".5", "nan", "inf", "'a'", '"\\N{nope}"', "'\\x4'", "'\\x41'",
         "'\\ud800'", "'\\U00110000'", "'a\x00b'", "'a\rb'", "'\\0'", "'\\q'", "''", "'\u2028'",
         "'\\N{NULL}'", "unbroadcast", "not_implemented", "max", "len", "sum", "zip", "like",
         "broadcast", "reduce", "empty", "dynamic", "float32", "None", "True", "__class__",
         "__import__", "getattr", "ex", "gr\u00e4d", "_x", "os", "load"]
OPS = [" + ", " - ", " * ", " // ", " % ", " ** ", " @ ", " == ", " is ", " is not ", " or ",
       " and ", " if n else ", ", "]
PUNCT = ["(", ")", "[", "]", ".", "=", ":", "*", "-", ";", " for x in ", "\r", "\x00", "\\",
         "'", '"']
ATTRS = [".shape", ".size(0)", ".dim()", ".dtype", ".sum()", ".__class__", ".os",
         ".system('x')", ".nn.functional.gelu", ".load('x')", "._C", ".where", ".ops.aten",
         ".float32.is_floating_point", ".eps", ".bit_length()", ".__globals__"]
CALLS = ["unbroadcast", "not_implemented", "like", "broadcast", "reduce", "empty", "dynamic",
         "torch.where", "max", "len", "sum", "torch.os.system", "getattr"]

atom = st.tuples(st.sampled_from(ATOMS), st.lists(st.sampled_from(ATTRS), max_size=2)).map(
    lambda t: t[0] + "".join(t[1]))


def _extend(inner):
    return st.one_of(
        st.tuples(inner, st.sampled_from(OPS), inner).map("".join),
        st.tuples(st.sampled_from(CALLS), st.lists(inner, max_size=3)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"),
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        inner.map(lambda x: f"({x})"),
        inner.map(lambda x: f"-{x}"),
    )


expressions = st.recursive(atom, _extend, max_leaves=6)
# Mutations: a piece of punctuation or an atom inserted somewhere.
mutated = st.tuples(expressions, st.integers(0, 10_000), st.sampled_from(PUNCT + ATOMS)).map(
    lambda t: t[0][:t[1] % (len(t[0]) + 1)] + t[2] + t[0][t[1] % (len(t[0]) + 1):])
texts = st.one_of(expressions, mutated)

DEFAULTS = ["int a=", "float a=", "Scalar a=", "str a=", "SymInt a=", "DeviceIndex a=",
            "float[2] a=", "int? a=", "int[] a="]
NUMBERS = ["99999999999999999999999", "9223372036854775808", "-9223372036854775809",
           "9223372036854775807", "-9223372036854775808", "9" * 5000, "1e-400", "1e400", "0777",
           "2.225073858507201e-308", "0e-400", "1e-400j", "'a\rb'", "'a\x00b'", "'a\\000b'",
           "'\u2028'", "1000", "-129", "[1, 99999999999999999999]", "[0777]"]


def _op_file(func: str, fake: str, derivatives: dict[str, str] | None) -> str:
    text = "- func: " + json.dumps(func) + "\n  dispatch: {CPU: f_cpu}\n"
    text += "  fake: " + json.dumps(fake) + "\n"
    if derivatives:
        text += "  derivatives:\n" + "".join(f"    {k}: {json.dumps(v)}\n"
                                             for k, v in derivatives.items())
    return text


def _check(tmp_path: Path, text: str) -> None:
    p = tmp_path / "ops.yaml"
    p.write_text(text, encoding="utf-8", newline="")
    try:
        lib = load_library([str(p)])
        project = config.default_project(Path.cwd())
        _check_python_side(lib, project)
        diags = lib.diagnostics()
        fileset = render(lib, diags, project)
        diags.raise_if_errors()
    except UserError as e:
        assert e.diags.items and all(d.loc.path == str(p) for d in e.diags.items)
        return
    for rel, content in fileset.files.items():
        content.encode("utf-8")
        if rel.endswith((".py", ".pyi")):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                compile(content, rel, "exec")


def _settings(n: int):
    return settings(max_examples=settings.default.max_examples if FUZZ else n, deadline=None,
                    derandomize=not FUZZ,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@_settings(150)
@given(formula=texts)
@example(formula="grad * 0777")
@example(formula='not_implemented("\\N{nope}")')
@example(formula="not_implemented('a\x00b')")
@example(formula="grad * " + "9" * 5000)
@example(formula="unbroadcast")
@example(formula="not_implemented('a\rb')")
@example(formula="torch.os.system('true')")
@example(formula="grad.__class__.__init__.__globals__")
@example(formula="-" * 3000 + "grad")
@example(formula="grad if n is 1 else grad")
def test_formulas(tmp_path, formula):
    _check(tmp_path, _op_file(SCHEMA, "like(self)", {"self": formula, "other": "non_differentiable",
                                                      "ts": "non_differentiable"}))


@_settings(150)
@given(rule=texts)
@example(rule="empty([99999999999999999999999])")
@example(rule="like(self) if mode == 'a\rb' else like(other)")
@example(rule='like(self) if mode == "\\N{nope}" else like(other)')
@example(rule="empty([" + "9" * 5000 + "])")
@example(rule="empty([" + "-" * 3000 + "1])")
@example(rule="empty([9223372036854775807 * 2])")
def test_fake_rules(tmp_path, rule):
    _check(tmp_path, _op_file(SCHEMA, rule, None))


@_settings(100)
@given(st.lists(st.tuples(st.sampled_from(DEFAULTS), st.sampled_from(NUMBERS)), max_size=3))
@example([("int a=", "99999999999999999999999")])
@example([("int a=", "9" * 5000)])
@example([("float a=", "9" * 400)])
def test_schema_defaults(tmp_path, defaults):
    args = ", ".join(f"{d.replace(' a=', f' a{i}=')}{v}" for i, (d, v) in enumerate(defaults))
    _check(tmp_path, _op_file(f"ex::f(Tensor self{', ' if args else ''}{args}) -> Tensor",
                              "like(self)", None))
