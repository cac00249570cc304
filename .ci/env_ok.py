"""Exit 0 when this interpreter already has every pin of requirements-dev.txt, else 1.

Every make target that runs opgen runs it first, so the set-up is installed once and costs a
fraction of a second afterwards (pip itself takes seconds even when there is nothing to do). The
file pins exact versions (`name==version`), so no requirement parser is needed.
"""

import sys
from importlib import metadata
from pathlib import Path


def main() -> int:
    path = Path(__file__).resolve().parent.parent / "requirements-dev.txt"
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, pinned = line.partition("==")
        if not sep:
            return 1  # not an exact pin: let pip decide
        try:
            version = metadata.version(name.strip())
        except metadata.PackageNotFoundError:
            return 1
        if version.split("+")[0] != pinned.strip():
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
