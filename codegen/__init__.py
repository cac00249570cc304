"""Declare PyTorch custom operators once in YAML; generate registrations, kernels' declarations,
fake kernels, autograd and a typed Python API from one IR."""

from codegen.parse import SchemaSyntaxError, parse_schema

__all__ = ["parse_schema", "SchemaSyntaxError"]
