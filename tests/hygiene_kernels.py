"""Python kernels of tests/hygiene/nasty_py.yaml, named after what a generated module uses itself
(`functools`, builtins): the generated registrations must import them under other names."""

import torch


def functools(info, in_dims):
    return info + 2 * in_dims


def max(self):  # noqa: A001  (the point of the test)
    return self * 3


def sum(self):  # noqa: A001
    return self + 10


def len(self):  # noqa: A001
    return -self


def accumulate(result, other):
    return result + other


def accumulate_out(result, other, *, out):
    return out.copy_(result + other)


def accumulate_(self, result):
    return self.add_(result)


def eof(NULL, s="\r\n\x1b*/\\\""):  # noqa: N803  (named after the C macro)
    return NULL * 5 if s == "\r\n\x1b*/\\\"" else NULL
