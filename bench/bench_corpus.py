"""Acceptance of real custom-op schemas through the whole pipeline: `check`, then `generate`.

    python bench/bench_corpus.py [--keep DIR] [--verbose]

The corpus is tests/corpus/custom_op_schemas.tsv (2,351 schemas from 21 public op libraries, each
accepted by torch._C.parse_schema; see tests/corpus/README.md). Each schema becomes one op,
declared with no kernels (an op file entry with only `func:` declares the op: `m.def`), in a
namespace per library; the schema's own namespace is dropped, the rest is kept verbatim. An op
name that recurs within a library (several versions of one op) goes to a second namespace
(`<library>_2`), so every schema is an op of its own.

The op files are handed to the command line as a user would (`python -m codegen check DIR`, then
`generate`, in a project of its own). Each error is attributed to the op on its line and that op is set
aside with the error's message; the rest is run again until both commands succeed (some checks run
only once the earlier ones pass). Prints accepted / torch-valid, and the refusal reasons grouped
(names and numbers in messages blanked) and counted, with one example each; warnings likewise.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus" / "custom_op_schemas.tsv"
# load.py stops reporting after 50 errors in a file; smaller files keep every error visible.
OPS_PER_FILE = 40

_NAMESPACE_RE = re.compile(r"\s*([A-Za-z_]\w*)\s*::\s*")
_NAME_RE = re.compile(r"\s*([A-Za-z_]\w*)(?:\s*\.\s*(\w+))?\s*\(")
_DIAG_RE = re.compile(r"^(.+?):(\d+):(\d+): (error|warning): (.*)$")


def load_corpus() -> list[tuple[str, str, str]]:
    with open(CORPUS, encoding="utf-8", newline="") as f:
        return [tuple(r) for r in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def library_namespace(repo: str) -> str:
    return re.sub(r"\W+", "_", repo.lower()).strip("_")


class Op:
    def __init__(self, index: int, schema: str, repo: str, path: str, namespace: str):
        self.index, self.schema, self.repo, self.path = index, schema, repo, path
        self.namespace = namespace
        m = _NAMESPACE_RE.match(schema)
        self.func = schema[m.end():] if m else schema   # our namespace replaces the library's


def assign_namespaces(rows) -> list[Op]:
    seen: collections.Counter = collections.Counter()
    ops = []
    for i, (schema, repo, path) in enumerate(rows):
        stripped = _NAMESPACE_RE.sub("", schema, count=1)
        m = _NAME_RE.match(stripped)
        key = (repo, m.group(1) if m else stripped, m.group(2) or "" if m else "")
        seen[key] += 1
        ns = library_namespace(repo) + (f"_{seen[key]}" if seen[key] > 1 else "")
        ops.append(Op(i, schema, repo, path, ns))
    return ops


def write_files(ops: list[Op], where: Path) -> dict[tuple[str, int], Op]:
    """Op files under `where` (removed first); returns (file relative to the project, line) ->
    op."""
    for old in where.glob("*.yaml"):
        old.unlink()
    by_ns: dict[str, list[Op]] = collections.defaultdict(list)
    for op in ops:
        by_ns[op.namespace].append(op)
    lines_of: dict[tuple[str, int], Op] = {}
    for ns, group in sorted(by_ns.items()):
        for k in range(0, len(group), OPS_PER_FILE):
            path = where / f"{ns}_{k // OPS_PER_FILE:03d}.yaml"
            lines = [f"namespace: {ns}", "ops:"]
            for op in group[k:k + OPS_PER_FILE]:
                lines.append(f"  - func: {json.dumps(op.func)}")
                lines_of[(path.relative_to(where.parent).as_posix(), len(lines))] = op
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines_of


# A project of its own, so this repository's configuration (its kernels) stays out of it.
PYPROJECT = """\
[tool.opgen]
package = "corpus_ops"
schemas = ["schemas"]
kernels = []
"""


def run(args: list[str], project: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "codegen", *args], cwd=project, env=env,
                          capture_output=True, text=True)


def diagnostics(stderr: str) -> list[tuple[str, int, str, str, str | None]]:
    """(file, line, severity, message, hint) of each diagnostic in the command's output."""
    out = []
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        m = _DIAG_RE.match(line)
        if m:
            hint = None
            for nxt in lines[i + 1:i + 4]:
                if _DIAG_RE.match(nxt):
                    break
                if nxt.startswith("hint: "):
                    hint = nxt[6:]
            out.append((m.group(1), int(m.group(2)), m.group(4), m.group(5), hint))
    return out


def reason(message: str) -> str:
    """The message with the names and numbers it quotes blanked, so alike refusals group."""
    text = re.sub(r"'[^']*'", "'…'", message)
    text = re.sub(r"\(in op [^)]*\)", "(in op …)", text)
    text = re.sub(r"\b(op|Tensor)(\([^)]*\)| [\w:.]+(?= and))", r"\1 …", text)
    return re.sub(r"\b\d+\b", "N", text)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", metavar="DIR", help="write the op files here and keep them")
    ap.add_argument("--verbose", action="store_true", help="list every refused schema")
    args = ap.parse_args()
    import torch

    rows = load_corpus()
    torch_valid = 0
    for schema, _, _ in rows:
        try:
            torch._C.parse_schema(schema)
            torch_valid += 1
        except RuntimeError:
            pass
    ops = assign_namespaces(rows)
    refused: dict[int, tuple[str, str, str]] = {}   # op index -> (stage, message, hint)
    warnings: dict[int, list[str]] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(args.keep) if args.keep else Path(tmp)
        where = project / "schemas"
        where.mkdir(parents=True, exist_ok=True)
        (project / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
        live = list(ops)
        stages = (("check", ["check"]), ("generate", ["generate"]))
        for stage, cmd in stages:
            rounds = 0
            while live:
                rounds += 1
                lines_of = write_files(live, where)
                proc = run([*cmd, "--project", ".", "schemas"], project)
                found = diagnostics(proc.stderr)
                for path, line, severity, message, hint in found:
                    op = lines_of.get((path, line))
                    if op is not None and severity == "warning" and stage == "check":
                        warnings[op.index].append(message)
                if proc.returncode == 0:
                    break
                bad = set()
                for path, line, severity, message, hint in found:
                    op = lines_of.get((path, line))
                    if severity != "error":
                        continue
                    if op is None:
                        print(f"error not on an op's line ({path}:{line}): {message}")
                        return 1
                    refused.setdefault(op.index, (stage, message, hint))
                    bad.add(op.index)
                if not bad:
                    print(f"`{' '.join(cmd)}` failed with no located error:\n{proc.stderr[-2000:]}")
                    return 1
                live = [op for op in live if op.index not in bad]
            print(f"{stage}: {rounds} run(s)")

    accepted = len(ops) - len(refused)
    print(f"\naccepted / torch-valid: {accepted} / {torch_valid} "
          f"({100 * accepted / torch_valid:.1f}%)")
    groups: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    for i, (stage, message, _) in refused.items():
        groups[(stage, reason(message))].append(i)
    print(f"\nrefused: {len(refused)}")
    for (stage, why), idx in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        first = ops[idx[0]]
        libs = collections.Counter(ops[i].repo for i in idx)
        print(f"  {len(idx):4d}  [{stage}] {why}")
        print(f"        e.g. {first.repo}: {refused[idx[0]][1]}")
        print(f"        libraries: " + ", ".join(f"{r} {n}" for r, n in libs.most_common(4))
              + (" ..." if len(libs) > 4 else ""))
        if args.verbose:
            for i in idx:
                print(f"          {ops[i].repo}/{ops[i].path}: {ops[i].schema}")
    wgroups: dict[str, int] = collections.Counter(
        reason(m) for ms in warnings.values() for m in ms)
    if wgroups:
        print(f"\nwarnings (accepted ops included), on {len(warnings)} ops:")
        for why, n in wgroups.most_common():
            print(f"  {n:4d}  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
