"""The parser on real custom-op schemas (tests/corpus/custom_op_schemas.tsv, see its README).

Every schema there is accepted by torch; each must parse, read back to the same IR from its
canonical text, and mean the same to torch: `torch._C.parse_schema` prints the same schema for the
canonical text as for the original. The one deliberate exception is a hexadecimal integer default,
which torch reads as 0 (tests/test_parse.py, STRICTER_THAN_TORCH): it must be refused with the
located error that says so.
"""

from __future__ import annotations

import csv
from pathlib import Path

import torch

from codegen import SchemaSyntaxError, parse_schema

CORPUS = Path(__file__).with_name("corpus") / "custom_op_schemas.tsv"

# op name -> (the refused text, the message's start): schemas refused on purpose.
REFUSED = {
    "transpose_embedding_input": ("0x2FFFFFF", "hexadecimal default '0x2FFFFFF' is 50331647, "
                                               "but torch reads it as 0"),
}


def corpus() -> list[tuple[str, str, str]]:
    with open(CORPUS, encoding="utf-8", newline="") as f:
        return [tuple(row) for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def _op_name(schema: str) -> str:
    return schema.split("(", 1)[0].split("::")[-1].split(".")[0].strip()


def test_corpus_is_the_cited_one():
    rows = corpus()
    assert len(rows) == 2351
    assert all(len(r) == 3 and r[1].count("/") == 1 and r[2] for r in rows)
    assert len({r[0] for r in rows}) == len(rows)


def test_every_schema_parses_and_torch_agrees():
    failures = []
    refused = set()
    for schema, repo, path in corpus():
        where = f"{repo}/{path}: {schema}"
        try:
            ours = parse_schema(schema)
        except SchemaSyntaxError as e:
            expected = REFUSED.get(_op_name(schema))
            if expected is None or not e.message.startswith(expected[1]) or \
                    schema[e.offset:e.offset + e.length] != expected[0]:
                failures.append(f"refused ({e}): {where}")
            refused.add(_op_name(schema))
            continue
        text = str(ours)
        if parse_schema(text) != ours:
            failures.append(f"IR round trip -> {text!r}: {where}")
            continue
        canonical = str(torch._C.parse_schema(text))
        original = str(torch._C.parse_schema(schema))
        if canonical != original:
            failures.append(f"torch reads {canonical!r}, not {original!r}: {where}")
    assert failures == []
    assert refused == set(REFUSED)


def test_spacing_styles_of_the_corpus():
    """Spellings torch tolerates and libraries use: no space after a suffix, space before one."""
    schemas = [r[0] for r in corpus()]
    for needle in ("Tensor?amax", "Tensor !", "Tensor []"):
        found = [s for s in schemas if needle in s]
        assert found, needle
        for s in found:
            parse_schema(s)
