"""The op reference's compile and export marks (codegen.dest.md_reference) are what the sample
checks (codegen.testing) do: on a library with one op of each kind torch.compile or torch.export
takes or refuses, a ✓ is a check that runs and passes, a ✗ one that is skipped or fails.
Python kernels only (tests/samplelib/kernels.py): nothing is built.
"""

from __future__ import annotations

import re

from codegen import testing
from codegen.diagnostics import Diagnostics
from codegen.dest import md_reference
from codegen.load import load_library
from tests import scratch

KINDS = """\
namespace: smpmarks
suppress: [not-functionalizable, non-tensor-return]
ops:
  # Taken by both.
  - func: twice(Tensor x) -> Tensor
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:twice}
    fake: like(x)
    samples: [{x: {shape: [N=5, 2]}}]
  # In-place with its functional variant; mutating and returning nothing (auto_functionalize).
  - func: bounded(Tensor self, float lo, float hi) -> Tensor
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:bounded}
    fake: like(self)
    samples: [{self: {shape: [N=5, 2], low: -2.0, high: 2.0}, lo: -1.0, hi: 1.0}]
  - func: bounded_(Tensor(a!) self, float lo, float hi) -> Tensor(a!)
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:bounded_}
    samples: [{self: {shape: [N=5, 2], low: -2.0, high: 2.0}, lo: -1.0, hi: 1.0}]
  - func: accumulate(Tensor(a!) buf, Tensor x) -> ()
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:accumulate}
    samples: [{buf: {shape: [N=4, 3]}, x: {shape: [N, 3]}}]
  # A view: compile cannot functionalize it; export, which decomposes a mutating op's program
  # only, takes it. Through a decomposition, both take it.
  - func: alias_of(Tensor(a) x) -> Tensor(a)
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:alias_of}
    fake: tests.samplelib.kernels:alias_of
    samples: [{x: {shape: [N=3, 2]}}]
  - func: view_of(Tensor(a) x) -> Tensor(a)
    dispatch: {CompositeImplicitAutograd: tests.samplelib.kernels:alias_of}
    samples: [{x: {shape: [N=3, 2]}}]
  # Writing a Tensor list, returning nothing (aten's foreach and fused optimizers):
  # auto_functionalize. Writing Tensors inside a nested list (apex's amp_C): it takes none.
  - func: scale_all_(Tensor(a!)[] xs, float s) -> ()
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:scale_all_}
    samples: [{xs: [{shape: [N=4, 3]}, {shape: [2]}], s: 2.0}]
  - func: scale_lists(Tensor(a!)[][] lists, float s) -> ()
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:scale_lists}
    samples: [{lists: [[{shape: [N=4, 3]}], [{shape: [N, 3]}]], s: 2.0}]
  # Mutating, returning a Tensor[]: auto_functionalize takes nothing but new Tensors.
  - func: double_rows_(Tensor(a!) x, int chunks) -> Tensor[]
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:double_rows_}
    fake: tests.samplelib.kernels:double_rows_fake
    samples: [{x: {shape: [6, D=4]}, chunks: 3}]
  # Mutating an optional Tensor it returns, with a functional variant: nothing to copy into
  # when it is None.
  - func: add_to(Tensor x, Tensor? y=None) -> Tensor
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:add_to}
    fake: like(x)
    samples: [{x: {shape: [N=4, 3]}, y: {shape: [N, 3]}}]
  - func: add_to.into(Tensor x, Tensor(a!)? y=None) -> Tensor(a!)
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:add_to_into}
    fake: like(x)
    samples: [{x: {shape: [N=4, 3]}, y: {shape: [N, 3]}}]
  # Returning what it mutates and a new Tensor (FlashAttention-3's shape).
  - func: attend(Tensor q, Tensor k, Tensor(a!)? out=None) -> (Tensor(a!), Tensor)
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:attend}
    fake: (like(q), empty([q.size(0)]))
    samples: [{q: {shape: [N=4, 8]}, k: {shape: [N, 8]}, out: {shape: [N, 8]}}]
  # Returning what it mutates, neither in-place nor out=, without a functional variant.
  - func: add_into_second(Tensor y, Tensor(a!) x) -> Tensor(a!)
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:add_into_second}
    samples: [{y: {shape: [N=3, 2]}, x: {shape: [N, 2]}}]
  # A lone int: no graph holds the call; export records the value. A Dict: export cannot save.
  - func: row_count(Tensor x) -> int
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:row_count}
    fake: x.size(0)
    samples: [{x: {shape: [N=4, 3]}}]
  - func: named_rows(Tensor x) -> Dict(str, Tensor)
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:named_rows}
    fake: tests.samplelib.kernels:named_rows
    samples: [{x: {shape: [N=4, 3]}}]
  # Traced, but lost by the program export saves: a list of numbers (not saved), a bool among
  # several returns (not loaded).
  - func: dims_of(Tensor x) -> int[]
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:dims_of}
    fake: tests.samplelib.kernels:dims_of
    samples: [{x: {shape: [N=4, 3]}}]
  - func: with_flag(Tensor x) -> (Tensor, bool)
    dispatch: {CompositeExplicitAutograd: tests.samplelib.kernels:with_flag}
    fake: tests.samplelib.kernels:with_flag
    samples: [{x: {shape: [N=4, 3]}}]
"""

CHECKS = ("compile", "export")


def marks(text: str) -> dict[str, dict[str, bool]]:
    """The support matrix of a reference page: op -> {column: ✓}."""
    lines = text.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("| op |")))
    columns = [c.strip() for c in lines[header].strip("|").split("|")][1:]
    out = {}
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        name, *cells = [c.strip() for c in line.strip("|").split("|")]
        op = re.fullmatch(r"\[`([^`]+)`\]\(#[^)]+\)", name).group(1)  # type: ignore[union-attr]
        out[op] = {c: v == md_reference.YES for c, v in zip(columns, cells)}
    return out


def passes(case: testing.Case, check: str) -> bool:
    if not testing.applies(case, check):
        return False
    try:
        testing.check(case, check)
    except Exception:
        return False
    return True


def test_the_reference_marks_what_the_sample_checks_do(tmp_path):
    path = tmp_path / "kinds.yaml"
    path.write_text(KINDS)
    with scratch.in_repo():
        lib = load_library([str(path)])
        loaded = testing.load_python_library([str(path)])
    try:
        diags = Diagnostics()
        (page,) = md_reference.generate(lib, diags, directory="ref").values()
        matrix = marks(page)
        marked, done = {}, {}
        for case in loaded.cases():
            name = md_reference._short_name(case.op)
            for check in CHECKS:
                marked[name, check] = matrix[name][check]
                done[name, check] = passes(case, check)
    finally:
        loaded.close()
    assert marked == done
    # Each kind is what torch makes it.
    taken = {name: tuple(c for c in CHECKS if done[name, c]) for name, _ in done}
    assert taken == {
        "twice": CHECKS, "bounded": CHECKS, "bounded_": CHECKS, "accumulate": CHECKS,
        "alias_of": ("export",), "view_of": CHECKS, "double_rows_": (), "add_to": CHECKS,
        "add_to.into": (), "attend": (), "add_into_second": (), "row_count": ("export",),
        "named_rows": (), "scale_all_": CHECKS, "scale_lists": (),
        "dims_of": ("compile",), "with_flag": ("compile",),
    }
