"""Batching rules generated for ops without `vmap:` whose schema torch's own loop fallback
refuses (codegen/dest/py_vmap.py, Note [Generated batching rules]): `vmap`, `grad`, `jacrev` and
`vmap(grad(...))` over a temporary library of Python kernels (below), loaded without C++; and
torch itself as the oracle of which schemas its fallback refuses.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from torch.func import grad, jacrev, vmap

from codegen import testing
from codegen.dest import py_vmap
from codegen.load import load_library
from tests import scratch

OPS = """\
namespace: vmaprules
ops:
  - func: split_by_sizes(Tensor x, SymInt[] sizes) -> Tensor[]
    dispatch: {CPU: "tests.test_vmap_rules:split_by_sizes"}
    fake: "tests.test_vmap_rules:split_by_sizes_fake"
    derivatives:
      x: torch.cat(grad, 0)
  - func: weighted(Tensor[] xs, float[] ws, *, float scale=1.0) -> Tensor
    dispatch: {CPU: "tests.test_vmap_rules:weighted"}
    fake: broadcast(*xs)
    derivatives:
      xs: '[grad * w * scale for w in ws]'
  - func: numel_of(Tensor x) -> int
    dispatch: {CPU: "tests.test_vmap_rules:numel_of"}
    fake: "tests.test_vmap_rules:numel_of"
  - func: positives(Tensor x) -> Tensor?
    dispatch: {CPU: "tests.test_vmap_rules:positives"}
    fake: like(x)
  - func: pieces(Tensor x) -> Tensor[]
    dispatch: {CPU: "tests.test_vmap_rules:pieces"}
    fake: "tests.test_vmap_rules:pieces_fake"
  - func: halves(Tensor x) -> Tensor[]
    dispatch: {CompositeImplicitAutograd: "tests.test_vmap_rules:halves"}
  - func: noisy(Tensor x, Generator? generator=None) -> Tensor[]
    tags: [nondeterministic_seeded]
    dispatch: {CPU: "tests.test_vmap_rules:noisy"}
    fake: '[like(x)]'
  - func: fill_(Tensor(a!) self, float value) -> ()
    dispatch: {CPU: "tests.test_vmap_rules:fill_"}
  - func: accumulate(Tensor(a!) buf, Tensor x, Tensor(b!)? count=None) -> ()
    dispatch: {CPU: "tests.test_vmap_rules:accumulate"}
  - func: zero_each_(Tensor(a!)[] xs) -> ()
    dispatch: {CPU: "tests.test_vmap_rules:zero_each_"}
  - func: cumsum_into(Tensor(a!) out, Tensor x) -> ()
    dispatch: {CPU: "tests.test_vmap_rules:cumsum_into"}
  - func: fill_out(Tensor x, float scale=1.0, *, Tensor(a!) out) -> ()
    dispatch: {CPU: "tests.test_vmap_rules:fill_out"}
    samples: [{x: {shape: [4, 3]}, scale: 2.0, out: {shape: [4, 3]}}]
  - func: split_scaled(Tensor x, SymInt[] sizes, *, Tensor scale) -> Tensor[]
    dispatch: {CPU: "tests.test_vmap_rules:split_scaled"}
    fake: "tests.test_vmap_rules:split_scaled_fake"
    samples: [{x: {shape: [3, 2]}, sizes: [1, 2], scale: {shape: [2]}}]
  - func: scale_out(Tensor x, float scale=1.0, *, Tensor(a!) out) -> Tensor(a!)
    dispatch: {CPU: "tests.test_vmap_rules:scale_out"}
  - func: scale_into(Tensor x, Tensor(a!) out) -> Tensor(a!)
    dispatch: {CPU: "tests.test_vmap_rules:scale_into"}
  - func: extrema(Tensor x, *, Tensor(a!) lo, Tensor(b!) hi) -> (Tensor(a!) lo, Tensor(b!) hi)
    dispatch: {CPU: "tests.test_vmap_rules:extrema"}
  - func: clip_count_(Tensor(a!) self, float limit) -> Tensor
    dispatch: {CPU: "tests.test_vmap_rules:clip_count_"}
    fake: "tests.test_vmap_rules:clip_count_fake"
  - func: halves_into.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)
    dispatch: {CompositeImplicitAutograd: "tests.test_vmap_rules:halves_into"}
  - func: scaled_sum(Tensor x, Tensor y, float scale) -> Tensor
    dispatch: {CompositeImplicitAutograd: "tests.test_vmap_rules:scaled_sum"}
"""

CALLS: list[str] = []


def split_by_sizes(x, sizes):
    CALLS.append("split_by_sizes")
    return [t.clone() for t in x.split(list(sizes))]


def split_by_sizes_fake(x, sizes):
    return [x.new_empty((s, *x.shape[1:])) for s in sizes]


def weighted(xs, ws, *, scale=1.0):
    return sum(x * w for x, w in zip(xs, ws)) * scale


def numel_of(x):
    return x.numel()


def positives(x):
    """x where every element is positive, else None: a value per batch element."""
    return x.clone() if bool((x > 0).all()) else None


def pieces(x):
    """One piece per positive element of the first row: the list's length depends on the data."""
    return [x.clone() for _ in range(int((x.reshape(-1)[:2] > 0).sum()))]


def pieces_fake(x):
    return [x.new_empty(x.shape)]


def halves(x):
    CALLS.append("halves")
    return list(x.chunk(2, -1))


def noisy(x, generator=None):
    return [x + torch.rand(x.shape, generator=generator)]


def fill_(self, value):
    CALLS.append("fill_")
    self.fill_(value)


def accumulate(buf, x, count=None):
    buf.add_(x)
    if count is not None:
        count.add_(1)


def zero_each_(xs):
    for x in xs:
        x.zero_()


def cumsum_into(out, x):
    """Writes as a C++ kernel through `out.data_ptr()` does: element after element in memory from
    out's first one, so assuming `out` contiguous."""
    CALLS.append(out.data_ptr())
    out.as_strided((out.numel(),), (1,)).copy_(x.reshape(-1).cumsum(0))


def fill_out(x, scale=1.0, *, out):
    """Writes through `out`'s data pointer, assuming it contiguous, as a C++ kernel does."""
    CALLS.append("fill_out")
    out.as_strided((out.numel(),), (1,)).copy_((x * scale).expand(out.shape).reshape(-1))


def scale_out(x, scale=1.0, *, out):
    """Writes through `out`'s data pointer, assuming it contiguous, as a C++ kernel does."""
    CALLS.append("scale_out")
    out.as_strided((out.numel(),), (1,)).copy_((x * scale).reshape(-1))
    return out


def scale_into(x, out):
    out.as_strided((out.numel(),), (1,)).copy_((x * 2.0).reshape(-1))
    return out


def extrema(x, *, lo, hi):
    lo.copy_(x.amin(0))
    hi.copy_(x.amax(0))
    return lo, hi


def clip_count_(self, limit):
    """Clips `self` to [-limit, limit] and returns how many elements it changed: a new Tensor."""
    count = (self.abs() > limit).sum()
    self.clamp_(-limit, limit)
    return count


def halves_into(x, *, out):
    CALLS.append("halves_into")
    return out.copy_(x * 0.5)


def scaled_sum(x, y, scale):
    CALLS.append("scaled_sum")
    return (x + y) * scale


def clip_count_fake(self, limit):
    return self.new_empty((), dtype=torch.int64)


def split_scaled(x, sizes, *, scale):
    CALLS.append("split_scaled")
    return [t * scale for t in x.split(list(sizes))]


def split_scaled_fake(x, sizes, *, scale):
    return [x.new_empty((s, *x.shape[1:])) for s in sizes]


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    path = tmp_path_factory.mktemp("vmaprules") / "ops.yaml"
    path.write_text(OPS)
    with scratch.in_repo():
        lib = testing.load_python_library([str(path)])
    yield lib
    lib.close()


def _loss(outputs):
    weights = [torch.linspace(-1.0, 2.0, o.numel(), dtype=o.dtype).view(o.shape) for o in outputs]
    return sum((o * w).sum() for o, w in zip(outputs, weights))


def test_every_op_without_a_rule_that_the_fallback_refuses_gets_one(library):
    kinds = {op.name.name: py_vmap.generated_rule(op) for op in library.ops}
    assert kinds == {"split_by_sizes": "loop", "weighted": "loop", "numel_of": "loop",
                     "positives": "loop", "pieces": "loop", "halves": "decompose",
                     "noisy": "loop", "fill_": "loop", "accumulate": "loop",
                     "zero_each_": "loop", "cumsum_into": "loop", "fill_out": "loop",
                     "split_scaled": "loop", "scale_out": "loop", "scale_into": "loop",
                     "extrema": "loop", "clip_count_": "loop", "halves_into": "decompose",
                     "scaled_sum": "decompose"}


@pytest.mark.parametrize("in_dim", [0, 1, -1])
def test_vmap_of_a_tensor_list_return(library, in_dim):
    op = torch.ops.vmaprules.split_by_sizes
    x = torch.randn(4, 5, 3).movedim(0, in_dim)
    got = vmap(lambda t: op(t, [2, 3]), in_dims=in_dim)(x)
    expected = [op(t, [2, 3]) for t in x.unbind(in_dim)]
    assert len(got) == 2
    for k in range(2):
        torch.testing.assert_close(got[k], torch.stack([e[k] for e in expected]))


def test_grad_jacrev_and_vmap_of_grad_through_a_tensor_list_return(library):
    op = torch.ops.vmaprules.split_by_sizes

    def loss(t):
        return _loss(op(t, [1, 3]))

    x = torch.randn(4, 2, dtype=torch.float64)
    leaf = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad(loss(leaf), leaf)
    torch.testing.assert_close(grad(loss)(x), expected)
    jac = jacrev(lambda t: tuple(op(t, [1, 3])))(x)
    torch.testing.assert_close(jac, torch.autograd.functional.jacobian(
        lambda t: tuple(op(t, [1, 3])), x))
    batch = torch.randn(3, 4, 2, dtype=torch.float64)
    got = vmap(grad(loss))(batch)
    each = []
    for t in batch:
        leaf = t.clone().requires_grad_()
        each.append(torch.autograd.grad(loss(leaf), leaf)[0])
    torch.testing.assert_close(got, torch.stack(each))


def test_a_tensor_list_argument_batched_in_part_with_a_keyword(library):
    op = torch.ops.vmaprules.weighted
    xs = torch.randn(3, 4)
    shared = torch.randn(4)
    got = vmap(lambda t: op([t, shared], [2.0, -1.0], scale=0.5))(xs)
    torch.testing.assert_close(got, torch.stack([op([t, shared], [2.0, -1.0], scale=0.5)
                                                 for t in xs]))
    g = vmap(grad(lambda t: op([t, shared], [2.0, -1.0], scale=0.5).sum()))(xs)
    torch.testing.assert_close(g, torch.full((3, 4), 1.0))


def test_a_non_tensor_return_is_the_same_for_every_batch_element(library):
    assert vmap(torch.ops.vmaprules.numel_of, out_dims=None)(torch.randn(3, 4, 5)) == 20
    x = torch.rand(3, 4) + 0.5
    torch.testing.assert_close(vmap(torch.ops.vmaprules.positives)(x), x)
    x[1, 2] = -1.0
    with pytest.raises(RuntimeError, match=r"vmap: vmaprules::positives returned a torch.float32 "
                       r"Tensor of shape \[4\] on cpu for one batch element and None for another: "
                       "they cannot be stacked into one batched Tensor"):
        vmap(torch.ops.vmaprules.positives)(x)


def test_lists_of_different_lengths_cannot_be_batched(library):
    x = torch.tensor([[1.0, 1.0], [1.0, -1.0]])
    with pytest.raises(RuntimeError, match=r"vmap: vmaprules::pieces returned 2 outputs for one "
                       r"batch element and 1 outputs for another: vmap batches a list element "
                       "by element, so every batch element needs the same length"):
        vmap(torch.ops.vmaprules.pieces)(x)


def test_a_composite_runs_its_decomposition_once_on_the_whole_batch(library):
    CALLS.clear()
    x = torch.randn(5, 3, 4)
    got = vmap(torch.ops.vmaprules.halves, in_dims=1)(x)
    assert CALLS == ["halves"]          # not once per batch element
    for k, half in enumerate(x.chunk(2, -1)):
        torch.testing.assert_close(got[k], half.movedim(1, 0))
    assert torch._C._dispatch_has_kernel_for_dispatch_key("vmaprules::halves",
                                                           "FuncTorchBatched")


def test_a_composite_returning_a_tensor_decomposes_where_the_fallback_would_loop(library):
    """torchaudio's lfilter (CompositeImplicitAutograd, `-> Tensor`): torch's fallback takes the
    schema, but ran the decomposition once per batch element."""
    op = torch.ops.vmaprules.scaled_sum
    x, y = torch.randn(5, 3, 4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    CALLS.clear()
    got = vmap(lambda t: op(t, y, 2.0), in_dims=1)(x)
    assert CALLS == ["scaled_sum"]
    torch.testing.assert_close(got, ((x + y) * 2.0).movedim(1, 0))
    g = vmap(grad(lambda t, w: op(t, w, 2.0).pow(2).sum(), argnums=1), in_dims=(0, None))(x, y)
    torch.testing.assert_close(g, (8.0 * (x + y)).sum(1))


def test_the_loop_calls_the_kernel_once_per_batch_element(library):
    CALLS.clear()
    vmap(lambda t: torch.ops.vmaprules.split_by_sizes(t, [1, 1]))(torch.randn(3, 2))
    assert CALLS == ["split_by_sizes"] * 3


def test_a_random_op_needs_randomness_different(library):
    x = torch.zeros(3, 2)
    with pytest.raises(RuntimeError, match="vmap: vmaprules::noisy is random, and its generated "
                       "batching rule draws separately for each batch element: call vmap with "
                       "randomness='different' \\(got 'error'\\)"):
        vmap(torch.ops.vmaprules.noisy)(x)
    (out,) = vmap(torch.ops.vmaprules.noisy, randomness="different")(x)
    assert out.shape == (3, 2) and not torch.equal(out[0], out[1])


@pytest.mark.parametrize("in_dim", [0, 1, -1])
def test_vmap_of_ops_that_write_and_return_nothing(library, in_dim):
    """Each batch element writes through its slice of the batch (torch's fallback refused such
    ops: "Batching rule not implemented ... doesn't work on out= or view ops")."""
    ops = torch.ops.vmaprules
    buf = torch.randn(4, 5, 3).movedim(0, in_dim)
    x = torch.randn(4, 5, 3).movedim(0, in_dim)
    count = torch.zeros(4)
    want = buf + x
    assert vmap(ops.accumulate, in_dims=(in_dim, in_dim, 0), out_dims=None)(buf, x, count) is None
    torch.testing.assert_close(buf, want)
    assert count.tolist() == [1.0] * 4
    shared = torch.randn(5, 3)      # unbatched, read only: added to every batch element
    want = buf + shared.unsqueeze(in_dim)
    vmap(ops.accumulate, in_dims=(in_dim, None), out_dims=None)(buf, shared)   # count left out
    torch.testing.assert_close(buf, want)
    CALLS.clear()
    vmap(lambda t: ops.fill_(t, 2.5), in_dims=in_dim, out_dims=None)(buf)
    assert CALLS == ["fill_"] * 4 and bool((buf == 2.5).all())
    a, b = torch.ones(4, 2), torch.ones(3, 4)
    vmap(lambda p, q: ops.zero_each_([p, q]), in_dims=(0, 1), out_dims=None)(a, b)
    assert not a.any() and not b.any()


@pytest.mark.parametrize("in_dim", [1, -1])
def test_a_kernel_writing_as_if_contiguous_gets_contiguous_outputs(library, in_dim):
    """A slice of the batch at a dim other than 0 is not contiguous: a kernel writing through
    its data pointer wrote other elements of the batch, silently. It writes to a contiguous
    copy, copied back into the slice, as a per-sample loop writes."""
    ops = torch.ops.vmaprules
    shape = [4, 2]
    shape.insert(in_dim % 3, 3)     # a batch of 3 at in_dim, in memory too
    x = torch.randn(shape)
    want = torch.zeros(3, 4, 2)
    for b in range(3):
        ops.cumsum_into(want[b], x.select(in_dim, b))
    buf = torch.zeros(shape)
    assert not buf.select(in_dim, 0).is_contiguous()
    vmap(ops.cumsum_into, in_dims=(in_dim, in_dim), out_dims=None)(buf, x)
    torch.testing.assert_close(buf.movedim(in_dim, 0), want)
    # A contiguous slice is written in place, with no copy.
    CALLS.clear()
    buf = torch.zeros(3, 4, 2)
    vmap(ops.cumsum_into, in_dims=(0, in_dim), out_dims=None)(buf, x)
    assert CALLS == [buf[b].data_ptr() for b in range(3)]
    torch.testing.assert_close(buf, want)


def test_a_written_argument_must_be_batched_with_the_others(library):
    """As torch's in-place rules: each batch element would write to the one shared Tensor."""
    ops = torch.ops.vmaprules
    buf, before = torch.zeros(3), torch.zeros(3)
    with pytest.raises(RuntimeError, match="vmap: vmaprules::accumulate writes to 'buf', which is "
                       "not batched, while another argument is: every batch element would "
                       "write to the same Tensor"):
        vmap(ops.accumulate, in_dims=(None, 0), out_dims=None)(buf, torch.ones(4, 3))
    assert torch.equal(buf, before)
    with pytest.raises(RuntimeError, match="writes to 'xs', which is not batched in every "
                       "element"):
        vmap(lambda p: ops.zero_each_([p, torch.ones(2)]), out_dims=None)(torch.ones(4, 2))


def test_a_function_calling_a_writing_op_on_a_copy_batches(library):
    def f(buf, x):
        buf = buf.clone()
        torch.ops.vmaprules.accumulate(buf, x * x)
        return buf

    bufs, xs = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(vmap(f)(bufs, xs), bufs + xs * xs)
    torch.testing.assert_close(vmap(vmap(f))(bufs[None], xs[None]), (bufs + xs * xs)[None])


# --------------------------------------------------------------------------------------------------
# Keyword-only Tensors: the rule is their positional twin's (Note [Positional twins])


@pytest.mark.parametrize("x_dim,out_dim", [(0, 0), (1, 1), (-1, 0), (0, 1), (None, 0),
                                           (None, -1)])
def test_vmap_of_an_op_writing_a_keyword_only_tensor(library, x_dim, out_dim):
    """torch.library.register_vmap refuses `fill_out(Tensor x, *, Tensor(a!) out)`; each batch
    element writes through its slice of `out` (a contiguous copy where the slice is not), reading
    its slice of `x`, or the one `x` when it is unbatched."""
    op = torch.ops.vmaprules.fill_out
    x = torch.randn(4, 5, 3).movedim(0, x_dim) if x_dim is not None else torch.randn(5, 3)
    out = torch.zeros(4, 5, 3).movedim(0, out_dim)
    each_x = x.unbind(x_dim) if x_dim is not None else [x] * 4
    CALLS.clear()
    got = vmap(lambda a, o: op(a, 2.0, out=o), in_dims=(x_dim, out_dim), out_dims=None)(x, out)
    assert got is None and CALLS == ["fill_out"] * 4
    torch.testing.assert_close(out.movedim(out_dim, 0), torch.stack([2.0 * e for e in each_x]))
    vmap(lambda a, o: op(a, out=o), in_dims=(x_dim, out_dim), out_dims=None)(x, out)  # default
    torch.testing.assert_close(out.movedim(out_dim, 0), torch.stack(list(each_x)))


def test_a_keyword_only_written_tensor_must_be_batched_with_the_others(library):
    """An unbatched `out` with a batched `x`: every element would write to the one `out`."""
    op = torch.ops.vmaprules.fill_out
    out, before = torch.zeros(3), torch.zeros(3)
    with pytest.raises(RuntimeError, match="vmap: vmaprules::fill_out writes to 'out', which is "
                       "not batched, while another argument is: every batch element would "
                       "write to the same Tensor"):
        vmap(lambda a: op(a, out=out), out_dims=None)(torch.ones(4, 3))
    assert torch.equal(out, before)
    # Nested: `out` batched by the outer vmap only, `x` by the inner one.
    with pytest.raises(RuntimeError, match="writes to 'out', which is not batched"):
        vmap(lambda o, xs: vmap(lambda a: op(a, out=o), out_dims=None)(xs),
             out_dims=None)(torch.zeros(2, 3), torch.ones(2, 4, 3))


def test_nested_vmap_of_an_op_writing_a_keyword_only_tensor(library):
    op = torch.ops.vmaprules.fill_out
    xs, outs = torch.randn(2, 4, 3), torch.zeros(2, 4, 3)
    vmap(lambda o, x: vmap(lambda a, p: op(a, 3.0, out=p), out_dims=None)(x, o),
         out_dims=None)(outs, xs)
    torch.testing.assert_close(outs, 3.0 * xs)
    # `x` batched by the outer vmap only: each inner element writes the outer element's `x`.
    xs, outs = torch.randn(2, 3), torch.zeros(2, 4, 3)
    vmap(lambda o, x: vmap(lambda p: op(x, out=p), out_dims=None, in_dims=1)(o),
         out_dims=None)(outs.movedim(1, 2), xs)
    torch.testing.assert_close(outs, xs[:, None].expand(2, 4, 3))
    # A function writing into a Tensor it makes: batched, so it may be written.
    def f(x):
        out = torch.empty_like(x)
        op(x, 0.5, out=out)
        return out
    x = torch.randn(3, 4, 2)
    torch.testing.assert_close(vmap(f, in_dims=1)(x), 0.5 * x.movedim(1, 0))


@pytest.mark.parametrize("in_dims", [(0, 0), (1, None), (None, 0), (-1, 1)])
def test_vmap_of_an_op_reading_a_keyword_only_tensor(library, in_dims):
    op = torch.ops.vmaprules.split_scaled
    shapes = ((3, 2), (2,))
    x, scale = (torch.randn(4, *s).movedim(0, d) if d is not None else torch.randn(*s)
                for s, d in zip(shapes, in_dims))
    got = vmap(lambda a, w: op(a, [1, 2], scale=w), in_dims=in_dims)(x, scale)
    each = [op(a, [1, 2], scale=w) for a, w in zip(
        *(t.unbind(d) if d is not None else [t] * 4 for t, d in zip((x, scale), in_dims)))]
    assert len(got) == 2
    for k in range(2):
        torch.testing.assert_close(got[k], torch.stack([e[k] for e in each]))


def test_a_call_batched_only_beyond_grad_reaches_the_rule_at_its_level(library):
    """`out` batched by the outer vmap, then grad, then an inner vmap over something else: the
    inner level passes the call down through grad to the outer one, whose rule writes it."""
    op = torch.ops.vmaprules.fill_out
    outs, x = torch.zeros(2, 3), torch.randn(3)

    def per_out(out, t):
        def loss(t):
            def element(u):
                op(x, 2.0, out=out)
                return u * u
            return vmap(element)(t).sum()
        return grad(loss)(t)

    t = torch.randn(2, 4, 5)
    torch.testing.assert_close(vmap(per_out)(outs, t), 2 * t)
    torch.testing.assert_close(outs, 2 * x.expand(2, 3))


def test_the_vmap_check_batches_keyword_only_tensors(library):
    """check_vmap batches `out` and `scale` with the others: fill_out all batched, then `out`
    alone (x unbatched: written into every element); split_scaled all batched, x alone at its
    last dim, `scale` alone."""
    counts = {case.op.name.name: testing.check_vmap(case) for case in library.cases()}
    assert counts == {"fill_out": 2, "split_scaled": 3}


def test_twins_live_in_opgens_namespace_and_leave_with_the_library(tmp_path: Path):
    """The twin is registered in `opgen_vmap_<ns>`, which close() removes with the namespace."""
    path = tmp_path / "ops.yaml"
    path.write_text(textwrap.dedent("""\
        namespace: vmaptwins
        ops:
          - func: fill_out(Tensor x, float scale=1.0, *, Tensor(a!) out) -> ()
            dispatch: {CPU: "tests.test_vmap_rules:fill_out"}
        """))
    for _ in range(2):      # loads again once closed
        with scratch.in_repo():
            lib = testing.load_python_library([str(path)])
        try:
            assert torch._C._dispatch_has_kernel_for_dispatch_key(
                "opgen_vmap_vmaptwins::fill_out", "FuncTorchBatched")
            out = torch.zeros(3, 2)
            vmap(lambda o: torch.ops.vmaptwins.fill_out(torch.ones(2), out=o),
                 out_dims=None)(out)
            assert bool((out == 1.0).all())
        finally:
            lib.close()
        assert not any(n.startswith(("vmaptwins::", "opgen_vmap_vmaptwins::"))
                       for n in torch._C._dispatch_get_all_op_names())


# --------------------------------------------------------------------------------------------------
# Ops that write and return what they write (out=): torch's fallback refuses them ("doesn't work on
# out= or view ops"); the loop writes each batch element and returns the batch it was given


DIMS = [(0, 0), (1, 1), (-1, 0), (0, 1), (None, 0), (None, -1), (1, -1)]


def _batch(shape, dim, size=4, fill=None):
    """A Tensor of `shape` batched at `dim` (`size` elements; None: unbatched), and its elements."""
    if dim is None:
        x = torch.randn(shape) if fill is None else torch.full(shape, fill)
        return x, [x] * size
    x = (torch.randn(size, *shape) if fill is None else torch.full((size, *shape), fill))
    x = x.movedim(0, dim)
    return x, list(x.unbind(dim))


@pytest.mark.parametrize("x_dim,out_dim", DIMS)
def test_vmap_of_an_out_op_returns_the_out_it_wrote(library, x_dim, out_dim):
    op = torch.ops.vmaprules.scale_out
    x, each_x = _batch((5, 3), x_dim)
    out, _ = _batch((5, 3), out_dim, fill=0.0)
    seen = []

    def f(a, o):
        r = op(a, 2.0, out=o)
        seen.append(r is o)         # the very Tensor passed, as an out= op returns it
        return r

    CALLS.clear()
    got = vmap(f, in_dims=(x_dim, out_dim))(x, out)
    want = torch.stack([2.0 * e for e in each_x])
    assert CALLS == ["scale_out"] * 4 and seen == [True]
    torch.testing.assert_close(out.movedim(out_dim, 0), want)
    torch.testing.assert_close(got, want)
    assert got.data_ptr() == out.data_ptr()     # out itself (a view of it at dim 0), no copy
    got = vmap(lambda a, o: op(a, out=o), in_dims=(x_dim, out_dim), out_dims=1)(x, out)
    torch.testing.assert_close(got, torch.stack(list(each_x), 1))      # the default scale


@pytest.mark.parametrize("x_dim,out_dim", DIMS)
def test_vmap_of_a_positional_out_op(library, x_dim, out_dim):
    """`scale_into(Tensor x, Tensor(a!) out) -> Tensor(a!)`: register_vmap takes its rule."""
    op = torch.ops.vmaprules.scale_into
    x, each_x = _batch((5, 3), x_dim)
    out, _ = _batch((5, 3), out_dim, fill=0.0)
    got = vmap(op, in_dims=(x_dim, out_dim))(x, out)
    want = torch.stack([2.0 * e for e in each_x])
    torch.testing.assert_close(out.movedim(out_dim, 0), want)
    torch.testing.assert_close(got, want)


def test_vmap_of_an_op_returning_two_outs(library):
    op = torch.ops.vmaprules.extrema
    x = torch.randn(3, 6, 4)
    lo, hi = torch.zeros(4, 3), torch.zeros(3, 4)
    got_lo, got_hi = vmap(lambda a, p, q: op(a, lo=p, hi=q), in_dims=(0, 1, 0))(x, lo, hi)
    torch.testing.assert_close(lo, x.amin(1).T)
    torch.testing.assert_close(hi, x.amax(1))
    torch.testing.assert_close(got_lo, x.amin(1))
    torch.testing.assert_close(got_hi, x.amax(1))


@pytest.mark.parametrize("in_dim", [0, 1, -1])
def test_vmap_of_an_op_writing_and_returning_a_new_tensor(library, in_dim):
    """`clip_count_(Tensor(a!) self, float limit) -> Tensor`: writes `self`, stacks the counts."""
    rows = torch.tensor([[0.5, 2.0, -3.0], [0.1, 0.2, 0.3], [4.0, 5.0, 6.0], [-1.5, 0.0, 1.5]])
    x = rows.movedim(0, in_dim).contiguous()
    counts = vmap(lambda t: torch.ops.vmaprules.clip_count_(t, 1.0), in_dims=in_dim)(x)
    assert counts.tolist() == [2, 0, 3, 2]
    assert bool((x.abs() <= 1.0).all()) and x.movedim(in_dim, 0)[1].tolist() == pytest.approx(
        [0.1, 0.2, 0.3])


def test_a_composite_out_op_runs_its_decomposition_on_the_batch(library):
    op = torch.ops.vmaprules.halves_into.out
    x, out = torch.randn(5, 4), torch.zeros(4, 5)
    CALLS.clear()
    got = vmap(lambda a, o: op(a, out=o), in_dims=(0, 1))(x, out)
    assert CALLS == ["halves_into"]
    torch.testing.assert_close(got, 0.5 * x)
    torch.testing.assert_close(out, 0.5 * x.T)


def test_nested_vmap_of_an_out_op(library):
    op = torch.ops.vmaprules.scale_out
    xs, outs = torch.randn(2, 4, 3), torch.zeros(4, 2, 3)
    got = vmap(lambda x, o: vmap(lambda a, p: op(a, 3.0, out=p))(x, o),
               in_dims=(0, 1))(xs, outs)
    torch.testing.assert_close(got, 3.0 * xs)
    torch.testing.assert_close(outs, 3.0 * xs.transpose(0, 1))
    # `x` batched by the outer vmap only: each inner element writes the outer element's `x`.
    xs, outs = torch.randn(2, 3), torch.zeros(2, 3, 4)
    got = vmap(lambda x, o: vmap(lambda p: op(x, out=p))(o))(xs, outs.transpose(1, 2))
    torch.testing.assert_close(got, xs[:, None].expand(2, 4, 3))
    torch.testing.assert_close(outs, xs[:, :, None].expand(2, 3, 4))


def test_an_unbatched_out_with_a_batched_input_raises(library):
    """Every batch element would write to the one `out`: nothing is written."""
    op = torch.ops.vmaprules.scale_out
    out, before = torch.zeros(3), torch.zeros(3)
    with pytest.raises(RuntimeError, match="vmap: vmaprules::scale_out writes to 'out', which is "
                       "not batched, while another argument is: every batch element would "
                       "write to the same Tensor"):
        vmap(lambda a: op(a, out=out))(torch.ones(4, 3))
    assert torch.equal(out, before)
    with pytest.raises(RuntimeError, match="vmap: vmaprules::scale_into writes to 'out', which is "
                       "not batched"):
        vmap(torch.ops.vmaprules.scale_into, in_dims=(0, None))(torch.ones(4, 3), out)
    with pytest.raises(RuntimeError, match="vmap: vmaprules::extrema writes to 'hi', which is "
                       "not batched"):
        vmap(lambda a, p: torch.ops.vmaprules.extrema(a, lo=p, hi=out))(
            torch.ones(2, 5, 3), torch.zeros(2, 3))
    # Nested: `out` batched by the outer vmap only, `x` by the inner one.
    with pytest.raises(RuntimeError, match="writes to 'out', which is not batched"):
        vmap(lambda o, xs: vmap(lambda a: op(a, out=o))(xs))(torch.zeros(2, 3),
                                                             torch.ones(2, 4, 3))
    assert torch.equal(out, before)


EXAMPLE_OUT_OPS = [("exops", "soft_shrink"), ("exstable", "scale")]


@pytest.mark.parametrize("x_dim,out_dim", DIMS)
@pytest.mark.parametrize("ns,name", EXAMPLE_OUT_OPS)
def test_vmap_of_the_example_out_ops(testing, ns, name, x_dim, out_dim):
    """The example's out= ops, C++ kernels on both ABIs (their rules in `_reg_<ns>`), against
    the op called on each batch element."""
    op = getattr(getattr(torch.ops, ns), name)
    x, each_x = _batch((5, 3), x_dim)
    out, _ = _batch((5, 3), out_dim, fill=0.0)
    got = vmap(lambda a, o: op.out(a, 0.25, out=o), in_dims=(x_dim, out_dim))(x, out)
    want = torch.stack([op(e, 0.25) for e in each_x])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(out.movedim(out_dim, 0), want)
    xs, outs = torch.randn(2, 4, 3), torch.zeros(2, 4, 3)
    got = vmap(vmap(lambda a, o: op.out(a, out=o)))(xs, outs)
    torch.testing.assert_close(got, op(xs.reshape(8, 3)).reshape(2, 4, 3))
    torch.testing.assert_close(outs, got)


@pytest.mark.parametrize("ns,name", EXAMPLE_OUT_OPS)
def test_the_example_out_ops_refuse_an_unbatched_out(testing, ns, name):
    op = getattr(getattr(torch.ops, ns), name).out
    out = torch.zeros(3)
    with pytest.raises(RuntimeError, match=f"vmap: {ns}::{name}.out writes to 'out', which is "
                       "not batched, while another argument is"):
        vmap(lambda a: op(a, out=out))(torch.randn(4, 3))
    assert not out.any()


@pytest.mark.filterwarnings("ignore:There is a performance drop")
@pytest.mark.parametrize("in_dim", [0, 1, -1])
def test_torchs_fallback_runs_the_example_in_place_op(testing, in_dim):
    """soft_shrink_ returns the `self` it writes: torch's in-place fallback loops over it, so it
    gets no rule."""
    x = torch.randn(4, 5, 3).movedim(0, in_dim)
    want = torch.stack([torch.ops.exops.soft_shrink(e, 0.25) for e in x.unbind(in_dim)])
    got = vmap(lambda t: torch.ops.exops.soft_shrink_(t, 0.25), in_dims=in_dim)(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x.movedim(in_dim, 0), want)


# --------------------------------------------------------------------------------------------------
# torch as the oracle: the schemas its fallback refuses are exactly those that get a rule

SCHEMAS = {
    "tensor": ("(Tensor x) -> Tensor", "x * 2"),
    "pair": ("(Tensor x) -> (Tensor, Tensor)", "(x * 2, x + 1)"),
    "optional_in": ("(Tensor x, Tensor? y) -> Tensor", "x * 2"),
    "ints_in": ("(Tensor x, int[] n) -> Tensor", "x * 2"),
    "list_out": ("(Tensor x) -> Tensor[]", "[x * 2]"),
    "optional_out": ("(Tensor x) -> Tensor?", "x * 2"),
    "int_out": ("(Tensor x) -> int", "3"),
    "mixed_out": ("(Tensor x) -> (Tensor, int)", "(x * 2, 3)"),
    "no_out": ("(Tensor x) -> ()", "None"),
    "writes_no_out": ("(Tensor(a!) x) -> ()", "None"),
    "list_in": ("(Tensor x, Tensor[] xs) -> Tensor", "x * 2"),
    "optional_list_in": ("(Tensor x, Tensor?[] xs) -> Tensor", "x * 2"),
    "keyword_in": ("(Tensor x, *, Tensor w) -> Tensor", "x * 2"),
    "keyword_in_list_out": ("(Tensor x, *, Tensor w) -> Tensor[]", "[x * 2]"),
    "writes_keyword_no_out": ("(Tensor x, *, Tensor(a!) w) -> ()", "None"),
    "out": ("(Tensor x, *, Tensor(a!) w) -> Tensor(a!)", "keywords['w']"),
    "positional_out": ("(Tensor x, Tensor(a!) w) -> Tensor(a!)", "rest[0]"),
    "two_outs": ("(Tensor x, *, Tensor(a!) w, Tensor(b!) v) -> (Tensor(a!), Tensor(b!))",
                 "(keywords['w'], keywords['v'])"),
    "writes_new_out": ("(Tensor(a!) x) -> Tensor", "x * 2"),
    "in_place": ("(Tensor(a!) x) -> Tensor(a!)", "x"),
    "in_place_reading": ("(Tensor(a!) x, Tensor w) -> Tensor(a!)", "x"),
    "in_place_writing_another": ("(Tensor(a!) x, Tensor(b!) w) -> Tensor(a!)", "x"),
    "view": ("(Tensor(a) x) -> Tensor(a)", "x"),
}

# Refused by torch, without a rule: a loop's stacked copies would lose a view's aliasing.
NO_RULE = {"view"}


def _refused_by_torch(name: str, schema: str, body: str) -> bool:
    lib = torch.library.Library("vmaporacle", "FRAGMENT")
    try:
        lib.define(name + schema)
        args = "x, *rest, **keywords"
        lib.impl(name, eval(f"lambda {args}: {body}"), "CPU")  # noqa: S307  (test-owned text)
        op = getattr(torch.ops.vmaporacle, name).default
        extra = [[torch.ones(2)]] if "[] xs" in schema else []
        extra += [None] if "Tensor? y" in schema else []
        extra += [[1]] if "int[] n" in schema else []
        try:
            if "Tensor(b!) v" in schema:
                vmap(lambda t, w, v: op(t, *extra, w=w, v=v))(
                    torch.randn(3, 2), torch.zeros(3, 2), torch.zeros(3, 2))
            elif "Tensor w" in schema or "Tensor(a!) w" in schema or "Tensor(b!) w" in schema:
                vmap(lambda t, w: op(t, *extra, w=w))(torch.randn(3, 2), torch.zeros(3, 2))
            else:
                vmap(lambda t: op(t, *extra))(torch.randn(3, 2))
        except RuntimeError as e:
            if "Batching rule not implemented" in str(e):
                return True
            raise
        return False
    finally:
        lib._destroy()


@pytest.mark.filterwarnings("ignore:There is a performance drop")
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_rules_are_generated_exactly_where_torch_refuses(tmp_path: Path, name):
    schema, body = SCHEMAS[name]
    path = tmp_path / "ops.yaml"
    path.write_text(textwrap.dedent(f"""\
        - func: vmapgen::{name}{schema}
          dispatch: {{CPU: {name}_cpu}}
        """))
    with scratch.in_repo():
        (op,) = load_library([str(path)]).ops
    refused = _refused_by_torch(name, schema, body)
    assert py_vmap.fallback_refuses(op) == refused
    assert (py_vmap.generated_rule(op) is not None) == (refused and name not in NO_RULE)


def test_an_argument_named_like_a_builtin_gets_its_rule(tmp_path: Path, capsys):
    """An argument that hides a builtin the batching rule calls (`list`, `sum`) costs the op
    neither `check` nor its rule: the rule reaches the builtin through an alias."""
    from codegen.__main__ import main as cli

    path = tmp_path / "ops.yaml"
    path.write_text(textwrap.dedent("""\
        - func: vmapgen::total(Tensor[] list) -> Tensor
          dispatch: {CPU: total_cpu, Meta: total_meta}
        - func: vmapgen::parts(Tensor x, int[] sum) -> Tensor[]
          dispatch: {CompositeImplicitAutograd: parts}
        """))
    with scratch.in_repo():
        ops = load_library([str(path)]).ops
        assert cli(["check", str(path)]) == 0, capsys.readouterr().err
    for op in ops:
        assert py_vmap.fallback_refuses(op) and py_vmap.generated_rule(op) is not None
