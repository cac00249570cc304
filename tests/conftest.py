"""Shared test setup: the repo root is importable (codegen, runtime) without installing."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Property tests: a quick profile by default, a long campaign with HYPOTHESIS_PROFILE=fuzz
# (`make fuzz`).
from hypothesis import settings  # noqa: E402

# The default run (make test, CI) is derandomized: the same cases every time, so a red run is a
# real regression; `make fuzz` draws fresh ones.
settings.register_profile("default", max_examples=60, deadline=None, derandomize=True)
settings.register_profile("fuzz", max_examples=3000, deadline=None)
settings.load_profile(__import__("os").environ.get("HYPOTHESIS_PROFILE", "default"))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def testing():
    """runtime.testing. Importing the runtime package loads the example library: build it first."""
    from tests import scratch

    built = scratch.build_example()
    assert built.returncode == 0, built.stdout + built.stderr
    from runtime import testing

    return testing


def pytest_terminal_summary(terminalreporter):
    """The fuzzing campaign's figures (tests/test_fuzz_opfiles.py), when it ran."""
    opfuzz = sys.modules.get("tests.opfuzz")
    if opfuzz is not None and opfuzz.STATS["cases"]:
        s = opfuzz.STATS
        terminalreporter.write_line(
            f"op-file fuzzing: {s['cases']} cases ({s['accepted']} accepted by check) in "
            f"{s['seconds']:.1f} s, {s['cases'] / max(s['seconds'], 1e-9):.0f} cases/s; "
            f"{s['compiled']} C++ units compiled")
