"""Incremental loading (Note [Incremental loading] in codegen/load.py): a library where one op file
changed parses only that file, with the same result and the same diagnostics as a fresh load."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from codegen import load
from codegen.diagnostics import UserError
from codegen.load import load_library

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def library(tmp_path, monkeypatch):
    for name in ("core.yaml", "python.yaml", "stable.yaml"):
        shutil.copy(ROOT / "schemas" / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    parsed: list[str] = []
    real = load._FileLoader.load

    def counting(self):
        parsed.append(self.path)
        return real(self)

    monkeypatch.setattr(load._FileLoader, "load", counting)
    return tmp_path, parsed


def test_unchanged_files_are_not_parsed_again(library):
    folder, parsed = library
    paths = ["core.yaml", "python.yaml", "stable.yaml"]
    first = load_library(paths, cache="cache")
    assert parsed == paths
    parsed.clear()
    again = load_library(paths, cache="cache")
    assert parsed == []
    assert again == first == load_library(paths)


def test_an_edited_file_alone_is_parsed(library):
    folder, parsed = library
    paths = ["core.yaml", "python.yaml", "stable.yaml"]
    load_library(paths, cache="cache")
    parsed.clear()
    text = (folder / "python.yaml").read_text()
    (folder / "python.yaml").write_text(text.replace("ops:", "# edited\nops:", 1))
    lib = load_library(paths, cache="cache")
    assert parsed == ["python.yaml"]
    parsed.clear()
    assert lib == load_library(paths)


def test_diagnostics_are_replayed(library):
    folder, parsed = library
    (folder / "bad.yaml").write_text(textwrap.dedent("""\
        namespace: cachetest
        ops:
          - func: scaled(Tensor self, float f) -> Tensor
            dispatch: {CPU: scaled_cpu}
          - func: broken(Tensor self -> Tensor
        """))
    messages = []
    for _ in range(2):
        with pytest.raises(UserError) as e:
            load_library(["bad.yaml"], cache="cache")
        messages.append(e.value.diags.render())
    assert parsed == ["bad.yaml"]          # the second run read the stored diagnostics
    assert messages[0] == messages[1]
    assert "bad.yaml:5:" in messages[0] and "^" in messages[0]


def test_an_unusable_entry_means_a_fresh_load(library):
    folder, parsed = library
    load_library(["core.yaml"], cache="cache")
    for entry in Path("cache").rglob("*"):
        if entry.is_file():
            entry.write_bytes(b"not a pickle")
    parsed.clear()
    assert load_library(["core.yaml"], cache="cache") == load_library(["core.yaml"])
    assert parsed == ["core.yaml", "core.yaml"]


def test_rules_are_part_of_the_key(library):
    from codegen import verify

    folder, parsed = library
    (folder / "kw.yaml").write_text(textwrap.dedent("""\
        namespace: cachetest
        ops:
          - func: pick(Tensor self, int from) -> Tensor
            dispatch: {CPU: pick_cpu}
        """))
    with pytest.raises(UserError):
        load_library(["kw.yaml"], cache="cache")
    allowed = verify.Rules(keyword_argument_exceptions=frozenset({("cachetest::pick", "from")}))
    lib = load_library(["kw.yaml"], cache="cache", rules=allowed)
    assert [str(op.name) for op in lib.ops] == ["cachetest::pick"]
    assert parsed == ["kw.yaml", "kw.yaml"]


def test_the_installed_torch_is_part_of_the_key(library, monkeypatch):
    # A formula may name a torch function opgen's record lacks when the installed torch has it
    # (Note [Formula vocabulary]); after a switch to a torch without it, the cached load of the
    # other torch must not pass the file.
    import importlib.util

    import torch

    folder, parsed = library
    (folder / "newer.yaml").write_text(textwrap.dedent("""\
        namespace: cachetest
        ops:
          - func: twice(Tensor self) -> Tensor
            dispatch: {CPU: twice_cpu}
            fake: like(self)
            derivatives:
              self: torch.qa_newer_function(grad)
        """))
    real_find_spec = importlib.util.find_spec

    def install(version: str) -> None:
        # What `pip install torch==<version>` changes on disk, as opgen sees it.
        site = folder / version / "torch"
        site.mkdir(parents=True)
        (site / "version.py").write_text(f"__version__ = '{version}'\n")
        spec = importlib.util.spec_from_file_location(
            "torch", site / "__init__.py", submodule_search_locations=[str(site)])
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: spec if name == "torch" else real_find_spec(name, *a))
        load._opgen_digest.cache_clear()

    install("2.99.0")
    monkeypatch.setattr(torch, "qa_newer_function", torch.neg, raising=False)
    assert [str(op.name) for op in load_library(["newer.yaml"], cache="cache").ops] == \
        ["cachetest::twice"]

    install("2.98.0")
    monkeypatch.delattr(torch, "qa_newer_function")
    messages = []
    for cache in ("cache", None):
        with pytest.raises(UserError) as e:
            load_library(["newer.yaml"], cache=cache)
        messages.append(e.value.diags.render())
    monkeypatch.undo()
    load._opgen_digest.cache_clear()
    assert parsed == ["newer.yaml"] * 3
    assert messages[0] == messages[1] == textwrap.dedent("""\
        newer.yaml:7:13: error: 'torch.qa_newer_function' does not exist
                  self: torch.qa_newer_function(grad)
                        ^~~~~~~~~~~~~~~~~~~~~~~
        1 error generated.""")
