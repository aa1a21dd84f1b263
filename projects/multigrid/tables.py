"""Writes the documents' headline results from the kept study results.

    python projects/multigrid/tables.py            # rewrite the generated parts
    python projects/multigrid/tables.py --check    # exit 1 when one is stale

``results/tables.yaml`` names, for each headline row, the folder of kept
results (``results/<folder>/*.json``, one file per run) holding its baseline
runs and the folder holding its default multigrid runs; rows measured before
results were kept per run carry their cells as recorded. From them this tool
writes:

* the results table and its summary sentences of the README and of
  docs/BENCHMARKS.md, between the markers ``<!-- generated: multigrid table
  -->`` and ``<!-- end generated -->``;
* the README quick start's expected range, between
  ``<!-- generated: quick start -->`` and ``<!-- end generated -->``;
* the ``expect`` line of each demo config a row names in
  ``docs/model_zoo.yaml`` (``python tools/dev/model_zoo.py`` then rewrites
  docs/MODEL_ZOO.md).

Accuracy is test top-1, mean over the paired seeds, with the 95% t interval
over seeds of the paired difference (``multigrid_study/headline.py``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Dict, List, Optional

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from multigrid_study.archive import load_kept  # noqa: E402
from multigrid_study.headline import (  # noqa: E402
    HeadlineRow,
    difference_text,
    headline_row,
    seeds_text,
    subset_range,
)
from multigrid_study.intervals import accuracy_interval  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(ROOT, "results", "tables.yaml")
README = os.path.join(ROOT, "README.md")
BENCHMARKS = os.path.join(ROOT, "docs", "BENCHMARKS.md")
MODEL_ZOO_DATA = os.path.join(ROOT, "docs", "model_zoo.yaml")
END = "<!-- end generated -->"
HEADERS = [
    "model (data)", "machine", "seeds", "baseline", "default multigrid",
    "multigrid minus baseline [95% CI]", "less wall-clock",
]  # fmt: skip
QUICK_START_VIDEOS = 500  # the quick start's test set: the study data's first


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a generated part is stale"
    )
    return parser.parse_args(argv)


def load_results(folder: str) -> List[dict]:
    """The kept results of ``results/<folder>``."""
    return load_kept(os.path.join(ROOT, "results", folder))


def compute_rows(spec: dict) -> List[tuple]:
    """(spec entry, ``HeadlineRow``) for each computed row of ``spec``."""
    rows = []
    for entry in spec["multigrid"]:
        row = headline_row(
            load_results(entry["baseline"]), load_results(entry["multigrid"])
        )
        rows.append((entry, row))
    return rows


def _span(low: float, high: float, fmt: str = ".1f") -> str:
    """``low-high``, or one value when they print alike."""
    a, b = format(low, fmt), format(high, fmt)
    return a if a == b else f"{a}-{b}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _seconds(value: Optional[float]) -> str:
    return f" in {value:.0f} s" if value is not None else ""


def table_line(entry: dict, row: HeadlineRow) -> str:
    speedup = f"{row.speedup:.2f}x" if row.speedup else "-"
    cells = [
        entry["model"],
        row.machine,
        seeds_text(row),
        f"{row.baseline_top1:.1f}%{_seconds(row.baseline_s)}",
        f"{row.multigrid_top1:.1f}%{_seconds(row.multigrid_s)}",
        difference_text(row),
        speedup,
    ]
    return "| " + " | ".join(cells) + " |"


def summary_sentence(entry: dict, row: HeadlineRow) -> str:
    speed = f" at {row.speedup:.2f}x less wall-clock" if row.speedup else ""
    seeds = _plural(len(row.seeds), "seed")
    return f"{entry['summary']}: {difference_text(row)} points{speed} ({seeds})."


def multigrid_block(spec: dict, rows: List[tuple]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + " --- |" * len(HEADERS)]
    lines += [table_line(entry, row) for entry, row in rows]
    lines += ["| " + " | ".join(r["cells"]) + " |" for r in spec.get("recorded", [])]
    sentences = [summary_sentence(e, r) for e, r in rows if e.get("summary")]
    return "\n".join(lines + [""] + sentences) + "\n"


def quick_start_block(rows: List[tuple]) -> str:
    for entry, _ in rows:
        if entry.get("quick_start"):
            runs = [
                r for r in load_results(entry["multigrid"]) if r["arm"] == "long_short"
            ]
            low, high = subset_range(runs, QUICK_START_VIDEOS) or (None, None)
            seeds = sorted(r["seed"] for r in runs)
            return (
                "Its test line gives the result (seeds "
                f"{seeds[0]}-{seeds[-1]} scored {low:.1f}-{high:.1f}% on one machine); "
                "seed 0 printed:\n"
            )
    raise ValueError("results/tables.yaml: no row has quick_start: true")


def demo_expectations(rows: List[tuple]) -> Dict[str, str]:
    """Config path -> the ``expect`` text of ``docs/model_zoo.yaml``."""
    out = {}
    for entry, row in rows:
        configs = entry.get("configs") or []
        for config, arm in zip(configs, ("baseline", "long_short")):
            folder = entry["baseline" if arm == "baseline" else "multigrid"]
            runs = {r["seed"]: r for r in load_results(folder) if r["arm"] == arm}
            top1 = [runs[s]["test_top1"] for s in row.seeds]
            interval = accuracy_interval(top1)
            acc = f"top-1 {sum(top1) / len(top1):.1f}%"
            if interval:
                acc += f" [{interval[1]:.1f}, {interval[2]:.1f}]"
            text = f"{acc} ({_plural(len(row.seeds), 'seed')}, "
            text += f"{row.test_videos:,} test videos"
            first = subset_range([runs[s] for s in row.seeds], QUICK_START_VIDEOS)
            on_quick_start_data = entry.get("quick_start_data", True)
            if first and row.test_videos > QUICK_START_VIDEOS and on_quick_start_data:
                text += f"; {_span(*first)}% on the demo's 500"
            text += ")"
            if arm == "long_short":
                text += f", {difference_text(row)} points against the baseline"
            minutes = [runs[s]["train_s"] / 60 for s in row.timing_seeds]
            if minutes:
                span = _span(min(minutes), max(minutes))
                text += f"; training {span} min on a {row.machine}"
            out[config] = text
    return out


def replace_block(text: str, name: str, body: str, path: str) -> str:
    start = f"<!-- generated: {name} -->"
    pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"{path}: no '{start}' ... '{END}' block")
    return pattern.sub(lambda _: f"{start}\n{body}{END}", text, count=1)


def replace_expectations(text: str, expected: Dict[str, str]) -> str:
    for config, line in expected.items():
        pattern = re.compile(rf"(^  {re.escape(config)}:\n    expect: ).*$", re.M)
        if not pattern.search(text):
            raise ValueError(f"docs/model_zoo.yaml: no demo entry {config}")

        def keep_key(m: re.Match[str], line: str = line) -> str:
            return m.group(1) + line

        text = pattern.sub(keep_key, text, count=1)
    return text


def generated(spec: dict) -> Dict[str, str]:
    """File path -> its text with every generated part rewritten."""
    rows = compute_rows(spec)
    with open(README) as f:
        readme = f.read()
    readme = replace_block(
        readme, "multigrid table", multigrid_block(spec, rows), README
    )
    readme = replace_block(readme, "quick start", quick_start_block(rows), README)
    with open(BENCHMARKS) as f:
        bench = f.read()
    block = multigrid_block(spec, rows)
    bench = replace_block(bench, "multigrid table", block, BENCHMARKS)
    with open(MODEL_ZOO_DATA) as f:
        zoo = replace_expectations(f.read(), demo_expectations(rows))
    return {README: readme, BENCHMARKS: bench, MODEL_ZOO_DATA: zoo}


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    with open(SPEC) as f:
        spec = yaml.safe_load(f)
    try:
        files = generated(spec)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stale = []
    for path, text in files.items():
        with open(path) as f:
            if f.read() == text:
                continue
        stale.append(os.path.relpath(path, ROOT))
        if not args.check:
            with open(path, "w") as f:
                f.write(text)
    if args.check and stale:
        print(
            f"stale: {', '.join(stale)}: run python projects/multigrid/tables.py",
            file=sys.stderr,
        )
        return 1
    for path in stale:
        print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
