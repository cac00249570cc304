"""Python kernels in a module that imports and assigns: a misspelled name is still found missing."""

import math

import torch

SCALE = math.pi


def scaled_kernel(x):
    return x * SCALE


if torch.__version__:
    def guarded_kernel(x):
        return x
