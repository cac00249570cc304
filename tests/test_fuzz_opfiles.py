"""Fuzzing campaign over whole op files, end to end through the CLI (oracles: tests/opfuzz.py).

Inputs come from the example op files (schemas/, tests/golden/**/inputs/) mutated at three levels:
raw bytes; YAML structure (keys dropped, duplicated, renamed, values retyped or nested); and the
languages inside the strings (schemas, fake rules, formulas, kernel names, file names) with hostile
tokens spliced in. Plus a pinned seed list: every input issue #7 reported.

`make test` runs the seeds and a few hundred derandomized cases in-process; `make fuzz`
(HYPOTHESIS_PROFILE=fuzz) runs thousands with fresh randomness, and the `slow` tests add the
`g++ -fsyntax-only` check of the generated C++ for the seeds and for sampled accepted inputs.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests import opfuzz
from tests.opfuzz import Case

HERE = Path(__file__).resolve().parent
FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"

CORPUS = {p.relative_to(HERE.parent).as_posix(): p.read_bytes()
          for p in sorted([*(HERE.parent / "schemas").glob("*.yaml"),
                           *(HERE / "golden").glob("**/inputs/**/*.yaml")])}


def run(case: Case, compile_cxx: bool = False) -> opfuzz.Result:
    __tracebackhide__ = True
    return opfuzz.fuzz_one(case, compile_cxx)


# --- seeds: the inputs of issue #7, pinned ------------------------------------------------------

PWN = "__import__('builtins').print('PWNED')#"


def _file(func: str, ns: str = "fz", extra: str = "", dispatch: str = "{CPU: f_cpu}",
          fake: str | None = "like(self)") -> bytes:
    text = f"namespace: {ns}\nops:\n  - func: {func}\n    dispatch: {dispatch}\n"
    if fake is not None:
        text += f"    fake: {fake}\n"
    return (text + extra).encode()


def _one(func: str, **kw) -> Case:
    return Case({"ops.yaml": _file(func, **kw)})


def _py_kernel(fn: str, body: str = "", func: str = "f(Tensor self) -> Tensor") -> Case:
    src = body or f"def {fn}(self):\n    return self.clone()\n"
    # With a formula: the generated module then imports functools and uses builtins.
    return Case({"ops.yaml": _file(func, dispatch=f'{{CompositeExplicitAutograd: "fzk:{fn}"}}',
                                   extra="    derivatives:\n      self: grad\n")},
                {"fzk.py": src})


def _formula(formula: str, func: str = "f(Tensor self) -> Tensor") -> Case:
    return _one(func, extra=f"    derivatives:\n      self: {formula}\n")


BIG = "99999999999999999999999"
HUGE = "1" + "0" * 5000
T = "f(Tensor self) -> Tensor"

SEEDS: dict[str, Case] = {
    # 1. code execution from an op file's name
    "1-newline-in-file-name": Case({f"a\n{PWN}.yaml": _file(T)}),
    "1-cr-in-file-name": Case({f"a\r{PWN}.yaml": _file(T)}),
    "1-crlf-in-file-name": Case({f"a\r\n{PWN}.yaml": _file(T)}),
    # 2. aborts at import
    "2-int-default-beyond-int64": _one(f"f(Tensor self, int n={BIG}) -> Tensor"),
    "2-namespace-aten": _one("fuzz_new_op(Tensor self) -> Tensor", ns="aten"),
    "2-namespace-prims": _one("fuzz_new_op(Tensor self) -> Tensor", ns="prims"),
    "2-namespace-quantized": _one("fuzz_new_op(Tensor self) -> Tensor", ns="quantized"),
    "2-namespace-mkldnn": _one("fuzz_new_op(Tensor self) -> Tensor", ns="mkldnn"),
    "2-existing-aten-op": _one("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
                               ns="aten", fake="broadcast(self, other)"),
    # 4. tracebacks from `check`
    "4-leading-zero-in-formula": _formula("grad * 0777"),
    "4-leading-zero-in-rule": _one("f(Tensor self, int n) -> Tensor",
                                   fake="'like(self) if n == 0777 else like(self)'"),
    "4-N-escape-in-rule": _one('f(Tensor self, str s) -> Tensor',
                               fake="'like(self) if s == \"\\N{nope}\" else like(self)'"),
    "4-N-escape-in-formula": _formula("'grad if \"\\N{nope}\" else grad'"),
    "4-N-escape-in-default": _one('f(Tensor self, str s="\\N{nope}") -> Tensor'),
    "4-NUL-in-rule-string": _one("f(Tensor self, str s) -> Tensor",
                                 fake='"like(self) if s == \'a\\0b\' else like(self)"'),
    "4-NUL-in-formula-string": _formula('"grad if \'a\\0b\' else grad"'),
    "4-backslash-0-in-rule": _one("f(Tensor self, str s) -> Tensor",
                                  fake="'like(self) if s == \"a\\0b\" else like(self)'"),
    "4-5000-digits-in-formula": _formula(f"grad * {HUGE}"),
    "4-5000-digits-in-rule": _one("f(Tensor self) -> Tensor", fake=f"empty([{HUGE}])"),
    "4-5000-digits-in-default": _one(f"f(Tensor self, int n={HUGE}) -> Tensor"),
    "4-builtin-outside-call": _formula("unbroadcast"),
    "4-cr-in-rule-string": _one("f(Tensor self, str s) -> Tensor",
                                fake='"like(self) if s == \\"a\\rb\\" else like(self)"'),
    "4-cr-in-formula-string": _formula('"grad if \\"a\\rb\\" else grad"'),
    # 5. accepted by check, then generate crashes
    "5-300-char-namespace": _one(T, ns="n" * 300),
    "5-250-char-file-name": Case({"f" * 250 + ".yaml": _file(T)}),
    # 8. accepted, then broken generated C++
    "8-cr-in-fake-rule": _one("f(Tensor self, int n) -> Tensor",
                              fake='"like(self) if n == 1\\relse like(self)"'),
    "8-argument-op": _one("f(Tensor self, int op) -> Tensor"),
    **{f"8-argument-{m}": _one(f"f(Tensor self, int {m}) -> Tensor")
       for m in ["EOF", "NULL", "INT_MAX", "TORCH_CHECK", "errno"]},
    **{f"8-op-{m}": _one(f"{m}(Tensor self) -> Tensor")
       for m in ["EOF", "NULL", "INT_MAX", "TORCH_CHECK", "errno"]},
    # 8. accepted, then broken generated Python
    **{f"8-argument-{a}-with-vmap": _one(f"f(Tensor self, Tensor {a}) -> Tensor",
                                         fake="broadcast(self, " + a + ")",
                                         extra="    vmap: pointwise\n")
       for a in ["info", "in_dims"]},
    **{f"8-python-kernel-{k}": _py_kernel(k) for k in ["max", "sum", "len"]},
    # A formula calling an op without derivatives makes the module import functools.
    "8-python-kernel-functools": Case(
        {"ops.yaml": _file(T, dispatch='{CompositeExplicitAutograd: "fzk:functools"}',
                           extra="    derivatives:\n      self: g(grad)\n"
                                 "  - func: g(Tensor x) -> Tensor\n    dispatch: {CPU: g_cpu}\n"
                                 "    fake: like(x)\n")},
        {"fzk.py": "def functools(self):\n    return self.clone()\n"}),
    "8-op-name": _one("name(Tensor self) -> Tensor"),
    "8-namespace-load_library": _one(T, ns="load_library"),
    **{f"8-op-{n}": _one(f"{n}(Tensor self) -> Tensor")
       for n in ["_OPS", "_torch", "__getattr__", "__name__", "Tensor"]},
    "8-NUL-in-doc": _one(T, extra='    doc: "a\\0b"\n'),
    # 8, more of the same, found by this campaign: op names that the generated runtime.ops
    # module or its stubs use (caching a resolved op replaces them), overload names that are
    # attributes of torch's OpOverloadPacket.
    **{f"8+-op-{n}": _one(f"{n}(Tensor self) -> Tensor")
       for n in ["sorted", "set", "globals", "KeyError", "AttributeError", "list"]},
    **{f"8+-overload-{n}": _one(f"f.{n}(Tensor self) -> Tensor") for n in ["overloads", "op"]},
    # 9. silently wrong
    "9-fake-size-beyond-int64": _one(T, fake=f"empty([{BIG}])"),
    "9-python-kernel-default-differs": _py_kernel(
        "f", "def f(self, n=2):\n    return self * n\n", "f(Tensor self, int n=1) -> Tensor"),
    "9-python-fake-default-differs": Case(
        {"ops.yaml": _file("f(Tensor self, float eps=0.5) -> Tensor", fake='"fzk:f_fake"')},
        {"fzk.py": "def f_fake(self, eps=0.25):\n    return self.new_empty(self.shape)\n"}),
    # 10. formulas reaching any attribute of torch
    "10-torch-os-system": _formula('grad * torch.os.system("true")'),
    "10-dunder-in-formula": _formula("grad * self.__class__(1)"),
}


@pytest.mark.parametrize("name", list(SEEDS))
def test_seed(name: str) -> None:
    run(SEEDS[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SEEDS))
def test_seed_cxx_compiles(name: str) -> None:
    run(SEEDS[name], compile_cxx=True)


# --- hypothesis strategies -----------------------------------------------------------------------

def settings_for(quick: int, fuzz: int):
    """`quick` derandomized examples in `make test`; `fuzz` with fresh randomness in `make fuzz`
    (HYPOTHESIS_PROFILE=fuzz)."""
    # Until every bug is fixed, the quick run minimizes only the first one it finds per property
    # (shrinking is what takes time); `make fuzz` minimizes and reports each distinct one.
    return settings(max_examples=fuzz if FUZZ else quick, deadline=None, derandomize=not FUZZ,
                    print_blob=True, report_multiple_bugs=FUZZ,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


NAMES = ["op", "EOF", "NULL", "INT_MAX", "TORCH_CHECK", "errno", "info", "in_dims", "__getattr__",
         "_OPS", "_torch", "__name__", "Tensor", "functools", "max", "sum", "len", "name",
         "load_library", "aten", "prims", "quantized", "mkldnn", "a" * 300, "m", "self", "grad",
         "ctx", "result", "torch", "_lib", "_ops", "at", "c10", "std", "main", "stdout", "unix",
         "linux", "TORCH_LIBRARY", "__init__", "__class__", "out", "default", "builtins", "sorted",
         "globals", "overloads", "_schema", "op_name", "x__y", "_", "__", "ops", "sym_size",
         "Scalar", "int", "float", "None", "True", "inf", "nan", "from", "global", "typing",
         "__all__", "__dict__", "__file__", "__path__", "register", "impl", "define", "define_",
         "dispatch", "runtime", "__iadd__", "out_", "_out", "py", "exec", "eval", "object", "set",
         "list", "KeyError", "AttributeError", "fz"]
INTS = [BIG, "9223372036854775807", "9223372036854775808", "-9223372036854775809", "0777", "00",
        HUGE, "0x10", "1_000", "1e400", "-0", "2**64", "1e-400", "0.0", "-1"]
STRINGS = ['"\\N{nope}"', "'a\\0b'", '"\\x00"', '"a\rb"', '"\u2028"', '"*/"', '"\\\\"', "'\\'",
           '"\\u0000"', '"??/"', '"\\n"', '"%s"', "'{{x}}'", '""', '"' + "s" * 300 + '"']
EXPRS = ["torch.os.system('true')", "torch.os", "unbroadcast", "grad * 0777", "__import__('os')",
         "self.__class__", "open('x')", "eval('1')", "lambda: 0", f"empty([{BIG}])", "like(self)",
         "grad", "dynamic()", "self.shape[0]", f"[0] * {BIG}", "torch.sigmoid", "sum", "max(self)",
         "broadcast(self, self)", "reduce(self, None)", "non_differentiable", "self.size(99)",
         "getattr(torch, 'os')", "grad.__class__", "(grad, grad)", "grad if self else grad",
         "zip", "len(self)", "torch._C", "torch.ops.fz.f(self)", "torch.ops.aten.add"]
CHARS = ["\r", "\n", "\x00", "\x0b", "\x0c", "\u2028", "\u2029", "\x85", "\t", "\\", '"', "'", "*/",
         "/*", "#", "\ufeff", "\x1b", "\x7f", "\ud800", "${x}", "%", "{", "}", "\\\n"]
TOKENS = NAMES + INTS + STRINGS + EXPRS + CHARS

FILE_NAMES = ["ops.yaml"] * 8 + [
    f"a\n{PWN}.yaml", f"a\r{PWN}.yaml", "a\r\nb.yaml", "a\u2028b.yaml", "a\x85b.yaml", "a*.yaml",
    'a"b.yaml', "a'b.yaml", "a\\b.yaml", "a b.yaml", "\u00fc.yaml", "f" * 250 + ".yaml",
    "-.yaml", "$(x).yaml", "a\x0bb.yaml", "a\x1bb.yaml", "a\x7fb.yaml", "a{{b}}.yaml",
    "a%sb.yaml", "a\tb.yaml", "1.yaml", "class.yaml", "stamp.yaml", "ops.yaml.yaml", ".yaml",
    "a??=.yaml", "a\\u000a.yaml", "EOF.yaml", "python.yaml", "_reg_fz.yaml"]


def _file_name(draw) -> str:
    return draw(st.sampled_from(FILE_NAMES))


class Dup(str):
    """A mapping key written as the same text as an existing one (a duplicated key)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(Dup, lambda d, v: d.represent_str(str(v)))


def dump(doc) -> bytes:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                     width=10**9).encode("utf-8", "surrogatepass")


# The op entries of the corpus in groups (an op with its in-place and out= variants, which
# `check` wants together), with their file's namespace. Cases take a few groups of one file: small,
# fast, easy to minimize, and mostly accepted before mutation. types.yaml's kernels become
# CompositeExplicitAutograd (no fake rule needed), as tests/test_cpp_types.py builds it.
def _groups() -> list[list[tuple[str, dict]]]:
    import re

    out = []
    for path, data in CORPUS.items():
        text = data.decode()
        if path.endswith("cpp/inputs/types.yaml"):
            text = re.sub(r", (CUDA|Meta): [\w:]+", "", text).replace(
                "{CPU:", "{CompositeExplicitAutograd:")
        doc = yaml.safe_load(text)
        if not isinstance(doc, dict):
            continue
        by_base: dict[str, list[tuple[str, dict]]] = {}
        for op in doc.get("ops", []):
            base = re.split(r"[.(]", op["func"].split("::")[-1])[0].rstrip("_")
            # Namespaces of their own: other tests load the corpus libraries into this process,
            # and the registration oracle defines each case's namespace with torch.
            by_base.setdefault(base, []).append(("fz" + (doc.get("namespace") or ""), op))
        if by_base:  # not an op file (schemas/sample_failures.yaml)
            out.append(sorted(by_base.values(), key=lambda g: len(dump([op for _, op in g]))))
    # Smallest first: hypothesis minimizes toward the first file's first group.
    return sorted(out, key=lambda groups: len(dump([op for _, op in groups[0]])))


GROUPS = _groups()


@st.composite
def corpus_docs(draw) -> dict:
    """`{namespace, ops}`: 1-3 op groups of one corpus file."""
    groups = draw(st.sampled_from(GROUPS))
    picks = draw(st.lists(st.integers(0, len(groups) - 1), min_size=1, max_size=3, unique=True))
    ops = [op for i in sorted(picks) for op in groups[i]]
    return {"namespace": ops[0][0], "ops": [copy.deepcopy(op) for _, op in ops]}


def _slots(doc) -> list[tuple[object, object]]:
    """(container, key) for every value in the tree, root-first."""
    out = []

    def walk(node):
        items = list(node.items()) if isinstance(node, dict) else (
            list(enumerate(node)) if isinstance(node, list) else [])
        for k, v in items:
            out.append((node, k))
            walk(v)

    walk(doc)
    return out


KEYS = ["func", "doc", "tags", "dispatch", "fake", "derivatives", "samples", "autocast", "vmap",
        "namespace", "ops", "shape", "values", "dtype", "requires_grad", "low", "high", "self",
        "CPU", "Meta", "CompositeImplicitAutograd", "output_differentiability", "device_type",
        "cast_inputs", "x, y", "bogus", "op", "EOF", "in_dims", "__getattr__"]
REPLACEMENTS = [None, True, 0, -1, 2**63, 2**64 + 1, 1.5, float("inf"), "", [], {}, "x", "yes",
                "like(self)", "pointwise", "pkg.mod:fn", "fzk:f", [None], {"k": None}]


@st.composite
def yaml_structure_cases(draw) -> Case:
    doc = draw(corpus_docs())
    for _ in range(draw(st.integers(1, 4))):
        slots = _slots(doc)
        if not slots:
            break
        parent, key = slots[draw(st.integers(0, len(slots) - 1))]
        old = parent[key]
        kind = draw(st.sampled_from(["drop", "dup", "retype", "rename", "wrap", "move",
                                     "stringify"]))
        if kind == "drop":
            del parent[key]
        elif kind == "dup":
            if isinstance(parent, list):
                parent.insert(key, copy.deepcopy(old))
            else:
                parent[Dup(key)] = copy.deepcopy(draw(st.sampled_from([old] + REPLACEMENTS)))
        elif kind == "retype":
            parent[key] = copy.deepcopy(draw(st.sampled_from(REPLACEMENTS)))
        elif kind == "rename" and isinstance(parent, dict):
            new = draw(st.sampled_from(KEYS))
            if new not in parent:
                parent[new] = parent.pop(key)
        elif kind == "wrap":
            parent[key] = draw(st.sampled_from([[old], {"ops": old}, {"k": old}]))
        elif kind == "move":
            other_parent, other_key = slots[draw(st.integers(0, len(slots) - 1))]
            if other_parent is not parent or other_key != key:
                parent[key] = copy.deepcopy(other_parent[other_key])
        elif kind == "stringify" and not isinstance(old, str):
            parent[key] = str(old)
    return Case({_file_name(draw): dump(doc)})


def _splice(draw, text: str) -> str:
    """One language-level edit of `text`: insert a token, replace an identifier or a number, or
    replace the whole value."""
    import re

    kind = draw(st.sampled_from(["ident", "number", "whole", "insert", "condition", "times"]))
    if kind == "ident" and (found := list(re.finditer(r"[A-Za-z_]\w*", text))):
        m = found[draw(st.integers(0, len(found) - 1))]
        return text[:m.start()] + draw(st.sampled_from(NAMES)) + text[m.end():]
    if kind == "number" and (found := list(re.finditer(r"\d+(?:\.\d+)?", text))):
        m = found[draw(st.integers(0, len(found) - 1))]
        return text[:m.start()] + draw(st.sampled_from(INTS)) + text[m.end():]
    if kind == "whole":
        return draw(st.sampled_from(EXPRS + NAMES))
    # Rules and formulas are expressions: literals spliced as operands keep them parseable.
    if kind == "condition":
        return f"{text} if {draw(st.sampled_from(STRINGS + INTS))} else {text}"
    if kind == "times":
        return f"{text} * {draw(st.sampled_from(INTS + STRINGS))}"
    i = draw(st.integers(0, len(text)))
    return text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]


def _rename_everywhere(node, old: str, new: str):
    """`node` with the word `old` replaced by `new` in every string and key."""
    import re

    word = re.compile(rf"(?<![\w.]){re.escape(old)}(?!\w)")
    if isinstance(node, str):
        return word.sub(lambda _: new, node)
    if isinstance(node, list):
        return [_rename_everywhere(v, old, new) for v in node]
    if isinstance(node, dict):
        return {_rename_everywhere(k, old, new): _rename_everywhere(v, old, new)
                for k, v in node.items()}
    return node


def _mutate_tokens(draw, doc: dict, n: int) -> None:
    import re

    for _ in range(n):
        action = draw(st.sampled_from(["rename", "splice", "namespace"]))
        if action == "namespace":
            doc["namespace"] = draw(st.sampled_from(NAMES))
            continue
        if action == "rename":
            # Rename a name of a schema (argument, op, overload, namespace) consistently through
            # the file: rules, formulas and samples keep referring to it, so `check` mostly
            # accepts, and the hostile name reaches the generators.
            op = doc["ops"][draw(st.integers(0, len(doc["ops"]) - 1))]
            if not isinstance(op, dict) or not isinstance(op.get("func"), str):
                continue
            names = sorted(set(re.findall(r"[A-Za-z_]\w*", op["func"]))
                           - {"Tensor", "int", "float"})
            if not names:
                continue
            old = names[draw(st.integers(0, len(names) - 1))]
            new = draw(st.sampled_from(NAMES))
            fixed = _rename_everywhere(doc, old, new)
            doc.clear()
            doc.update(fixed)
            continue
        slots = [(p, k) for p, k in _slots(doc) if isinstance(p[k], str)]
        # Half the splices go to the small languages (fake rules, formulas), the rest anywhere.
        rules = [(p, k) for p, k in slots if k == "fake" or (
            isinstance(p, dict) and any(isinstance(op, dict) and op.get("derivatives") is p
                                        for op in doc.get("ops", [])))]
        if rules and draw(st.booleans()):
            slots = rules
        parent, key = slots[draw(st.integers(0, len(slots) - 1))]
        parent[key] = _splice(draw, parent[key])


@st.composite
def token_cases(draw) -> Case:
    """Hostile tokens spliced into the strings of 1-3 corpus ops (schemas, rules, formulas, kernel
    names, docs, the namespace) and into derivative keys; a hostile file name now and then."""
    doc = draw(corpus_docs())
    _mutate_tokens(draw, doc, draw(st.integers(1, 3)))
    return Case({_file_name(draw): dump(doc)})


BYTE_TOKENS = [b"\r", b"\n", b"\x00", b"\xff", b"\xc3", b"\xe2\x80\xa8", b"\xc2\x85",
               b"\xef\xbb\xbf", b"\t", b"\x1b", b"\x7f", b'"', b"'", b"\\", b"#", b": ", b"- ",
               b"{", b"[", b"&a ", b"*a", b"!!python/object/apply:os.system ['true']", b"\\N{nope}",
               b"0777", b"9" * 25, b"\r\n", b"\x0c", b"\x0b", b"\\r", b"\\0", b"%YAML 1.2\n",
               b"---\n", b"? ", b"|\n"]

BYTE_POOL = BYTE_TOKENS + [t.encode("utf-8", "surrogatepass") for t in TOKENS]


@st.composite
def byte_cases(draw) -> Case:
    """Raw corpus files (or a dump of a few corpus ops) with bytes inserted, deleted, replaced,
    duplicated or cut off."""
    if draw(st.booleans()):
        data = bytearray(draw(st.sampled_from(list(CORPUS.values()))))
    else:
        data = bytearray(dump(draw(corpus_docs())))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(data)))
        n = draw(st.integers(1, 16))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "duplicate", "truncate",
                                     "random"]))
        if kind == "insert":
            data[i:i] = draw(st.sampled_from(BYTE_POOL))
        elif kind == "delete":
            del data[i:i + n]
        elif kind == "replace":
            data[i:i + 1] = draw(st.sampled_from(BYTE_TOKENS))
        elif kind == "duplicate":
            data[i:i] = data[i:i + n]
        elif kind == "truncate":
            del data[i:]
        else:
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
    return Case({_file_name(draw): bytes(data)})


@st.composite
def multi_file_cases(draw) -> Case:
    """Two op files, each a few corpus ops with at most one token edit: namespaces shared or
    not, the same op in both, hostile names."""
    files = {}
    for i in range(2):
        doc = draw(corpus_docs())
        _mutate_tokens(draw, doc, draw(st.integers(0, 1)))
        name = _file_name(draw)
        files[name if name not in files else "second.yaml"] = dump(doc)
    return Case(files)


# --- properties ----------------------------------------------------------------------------------

@settings_for(60, 1500)
@given(case=byte_cases())
def test_fuzz_bytes(case: Case) -> None:
    run(case)


@settings_for(80, 1500)
@given(case=yaml_structure_cases())
def test_fuzz_yaml_structure(case: Case) -> None:
    run(case)


@settings_for(120, 3000)
@given(case=token_cases())
def test_fuzz_tokens(case: Case) -> None:
    run(case)


@settings_for(30, 1000)
@given(case=multi_file_cases())
def test_fuzz_two_files(case: Case) -> None:
    run(case)


@pytest.mark.slow
@settings_for(8, 60)
@given(case=token_cases())
def test_fuzz_cxx_compiles(case: Case) -> None:
    """Token-level cases that `check` accepts, with the generated C++ compiled (seconds a unit)."""
    assume(run(case, compile_cxx=True).generated is not None)
