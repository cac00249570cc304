"""The `torch.Tag` names an op entry's `tags:` may use.

A static copy, so `check` needs no `import torch` (0.8 s); tests/test_load.py checks it against
`torch.Tag` of the installed torch. The C++ side spells each as `at::Tag::<name>`.
"""

TAGS: frozenset[str] = frozenset({
    "core",
    "cudagraph_unsafe",
    "data_dependent_output",
    "dynamic_output_shape",
    "flexible_layout",
    "generated",
    "inplace",
    "inplace_view",
    "maybe_aliasing_or_mutating",
    "needs_contiguous_strides",
    "needs_exact_strides",
    "needs_fixed_stride_order",
    "nondeterministic_bitwise",
    "nondeterministic_seeded",
    "out",
    "out_variant",
    "pointwise",
    "pt2_compliant_tag",
    "reduction",
    "view_copy",
})
