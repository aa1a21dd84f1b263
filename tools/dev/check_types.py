#!/usr/bin/env python3
"""Type-checks ``slowfast/``, ``workshop/``, ``tools/`` and ``projects/`` with mypy.

Settings: ``[tool.mypy]`` in pyproject.toml. The check passes when mypy finds
no error, and otherwise fails with mypy's report.

Usage:
    python tools/dev/check_types.py           # the repository (CI)
    python tools/dev/check_types.py PATH ...  # some files or folders
"""

import argparse
import os
import subprocess
import sys
from typing import List, Optional, Sequence

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The installed package, the workshop beside it, the scripts and the projects.
PATHS = ("slowfast", "workshop", "tools", "projects")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "paths",
        nargs="*",
        default=list(PATHS),
        help="what to check (default: %(default)s)",
    )
    return parser.parse_args(argv)


def run_mypy(paths: Sequence[str]) -> subprocess.CompletedProcess:
    """mypy on ``paths``, run from the repository root (its settings)."""
    cmd = [sys.executable, "-m", "mypy", *paths]
    return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)


def main(argv: Optional[List[str]] = None) -> int:
    done = run_mypy(parse_args(argv).paths)
    print(done.stdout, end="")
    if done.returncode:
        print(done.stderr, end="", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
