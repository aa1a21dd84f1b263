#!/usr/bin/env python3
"""Type-checks ``slowfast/`` with mypy against a recorded baseline.

The baseline (``tools/dev/mypy_baseline.txt``) lists the errors the package
had when the check started, one per line as ``path: message [code]`` (no line
numbers, so that edits elsewhere in a file do not move them). The check fails
on any error the baseline does not hold; when errors were fixed it says so,
and ``--update`` rewrites the baseline, which may only shrink.

Usage:
    python tools/dev/check_types.py            # CI: fails on a new error
    python tools/dev/check_types.py --update   # after fixing errors
"""

import argparse
import collections
import os
import re
import subprocess
import sys
from typing import Counter, List, Optional

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASELINE = os.path.join(REPO_ROOT, "tools", "dev", "mypy_baseline.txt")
# path:line: error: message  [code]
ERROR_LINE = re.compile(r"^(?P<path>[^:]+):\d+: error: (?P<message>.*)$")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--update", action="store_true", help="rewrite the baseline (shrink only)"
    )
    parser.add_argument("--baseline", default=BASELINE, help="the baseline file")
    return parser.parse_args(argv)


def normalize(output: str) -> Counter[str]:
    """mypy's output -> counts of ``path: message [code]`` entries."""
    found: Counter[str] = collections.Counter()
    for line in output.splitlines():
        match = ERROR_LINE.match(line.strip())
        if match:
            message = re.sub(r"\s+", " ", match["message"]).strip()
            found[f"{match['path']}: {message}"] += 1
    return found


def read_baseline(path: str) -> Counter[str]:
    with open(path) as f:
        return collections.Counter(line.rstrip("\n") for line in f if line.strip())


def run_mypy() -> str:
    cmd = [sys.executable, "-m", "mypy", "--no-error-summary", "slowfast"]
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1) or (done.returncode and not done.stdout):
        sys.exit(f"mypy failed to run (exit {done.returncode}):\n{done.stderr}")
    return done.stdout


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    found, baseline = normalize(run_mypy()), read_baseline(args.baseline)
    new = found - baseline
    fixed = baseline - found
    if new:
        print(f"{sum(new.values())} type error(s) not in {args.baseline}:")
        for entry in sorted(new.elements()):
            print(f"  {entry}")
        print("fix them (run `mypy slowfast` for their lines)")
        return 1
    if args.update:
        with open(args.baseline, "w") as f:
            f.writelines(f"{entry}\n" for entry in sorted(found.elements()))
        print(f"baseline rewritten: {sum(found.values())} error(s)")
    elif fixed:
        print(
            f"{sum(fixed.values())} baseline error(s) fixed: shrink the baseline "
            "with `python tools/dev/check_types.py --update`"
        )
    print(f"type check: {sum(found.values())} known error(s), none new")
    return 0


if __name__ == "__main__":
    sys.exit(main())
