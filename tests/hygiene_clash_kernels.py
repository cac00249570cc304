"""Python kernels of tests/hygiene/clash_py.yaml: their parameters are the ops' arguments, named
after what the generated Python uses itself."""

import torch


def pair(x, x_grad):
    return x * x_grad


def ctx_op(ctx, needs, saved, result):
    return ctx * needs + saved * result * result


def summed(x, sum, list=None):  # noqa: A002  (the point of the test)
    out = x * sum
    return out if list is None else out + list


def torch_op(torch, len):  # noqa: A002
    return torch * len.sum()


def cat_op(xs, xs_len, flat, _ops):
    return torch.stack(xs).sum(0) * xs_len + flat + _ops


def lists_op(list, len, flat):  # noqa: A002
    return 2 * torch.stack(list).sum(0) + 3 * torch.stack(len).sum(0) + flat


def split_op(x, outputs, flat_grads, tuple):  # noqa: A002
    return [x * outputs, x + flat_grads * 0], x * tuple


def opt_op(ctx, list=None, len=2):  # noqa: A002
    out = ctx * len
    return out if list is None else out + torch.stack(list).sum(0)


def scale(torch, list=2.0):  # noqa: A002
    return torch * list


def scale_(torch, list=2.0):  # noqa: A002
    return torch.mul_(list)


def scale_out(torch, list=2.0, *, out):  # noqa: A002
    return out.copy_(torch * list)


def rows(_ops, tuple):  # noqa: A002
    return _ops * tuple, _ops + tuple


def meta_op(x, x_shape, x_dtype):
    return x.reshape(x_shape).to(x_dtype, copy=True)


def count_op(xs, ys, xs_count):
    return xs_count * sum(x * y for x, y in zip(xs, ys))


def opt_count(x, xs=None, xs_count=2):
    return x * xs_count if xs is None else x * (xs_count + 1) + sum(xs)


def fill_kw(info, in_dims, *, _vmap_ops):
    _vmap_ops.copy_(info + in_dims)
