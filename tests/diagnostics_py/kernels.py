"""Python kernels with the wrong signatures, for the kernel-signature diagnostics cases."""


def good(x, bound=0.5):
    return x.clamp(-bound, bound)


def too_few(x):
    return x


def no_default(x, bound):
    return x


def extra_required(x, bound, scale):
    return x


def keywords(x, *, scale=1.0):
    return x


def keyword_required(x, *, scale):
    return x


def batching(info, in_dims, x):
    return x, 0


def wrong_default(x, bound=0.25):
    return x


def int_default(x, bound=1):
    return x


async def coroutine(x):
    return x


def weak_ref_fake(tensor):
    return tensor.view(tensor.shape)


class Kernels:
    """Methods named as `module:Class.method`: looked up on the class."""

    def with_self(self, x):
        return x

    @staticmethod
    def static_extra(x, scale):
        return x

    @classmethod
    def class_default(cls, x, bound=0.25):
        return x
