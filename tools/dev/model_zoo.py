#!/usr/bin/env python3
"""Writes the model-zoo table (docs/MODEL_ZOO.md) from the configs and their data.

Usage:
    python tools/dev/model_zoo.py            # (re)write docs/MODEL_ZOO.md
    python tools/dev/model_zoo.py --check    # exit 1 when docs/MODEL_ZOO.md is stale

Every YAML file under ``configs/`` gets a row: its model, input, test views,
parameters and GFLOPs of one test view (counted on the model the config builds,
so the table cannot drift from the code), and what ``docs/model_zoo.yaml`` says
of it: the reference's published result and checkpoint for the published
configs, the accuracy and training time to expect for the demo configs.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List, Optional

import yaml
from fvcore.common.config import CfgNode

from slowfast.config import load_config
from slowfast.models import build_model
from slowfast.models.model_stats import gflops, params_count

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(ROOT, "configs")
DATA = os.path.join(ROOT, "docs", "model_zoo.yaml")
OUTPUT = os.path.join(ROOT, "docs", "MODEL_ZOO.md")
BENCHMARKS = "benchmarks"  # the benchmark pages' folder, relative to docs/

HEADER = """# Model zoo

Every config under `configs/`, one row each. Parameters and GFLOPs (fvcore,
multiply-adds) are of one test view, counted on the model the config builds.
"Recipe" says whose recipe a full-size config is: the reference's
(PySlowFast), or ours and derived from which config. "Published" is the
reference's result for the architecture and recipe of the config, with its
checkpoint. The Kinetics baselines' checkpoints are Caffe2 pickles of models
that take BGR input
([docs/guide/checkpoints.md](guide/checkpoints.md#caffe2-checkpoints)).
Multigrid configs train with the long and short cycles
(`MULTIGRID.LONG_CYCLE`, `MULTIGRID.SHORT_CYCLE`); their models are their
baselines'. Where the long cycle's coarsest clips keep 2 frames or fewer (on
SlowFast's slow pathway: "slow"), the training column says so.

This page is written by `python tools/dev/model_zoo.py` from the configs and
`docs/model_zoo.yaml`; do not edit it by hand.
"""


PREDICT_SECTION = """
## Predictions on your own video

`tools/predict.py` runs a trained checkpoint on video files: each is cut into
the tester's views (the config's sampling, `TEST.NUM_ENSEMBLE_VIEWS` x
`TEST.NUM_SPATIAL_CROPS`), scored, and the views' scores combined as the tester
does (softmax, or sigmoid for Charades' multi-label head; the mean of the
views, or their maximum with `DATA.ENSEMBLE_METHOD max`). After the README's
quick start, without `--checkpoint` it takes the run's newest checkpoint:

```bash
python tools/predict.py --cfg configs/Demo/Kinetics_I3D_tiny_multigrid.yaml \\
    data/demo/kinetics/videos/test/3/test_00003.mp4 --top 3
```

prints (the scores on stdout, the log on stderr):

```
data/demo/kinetics/videos/test/3/test_00003.mp4 (mean softmax of 9 views)
  0.9927  class 3
  0.0035  class 8
  0.0016  class 2
```

`--labels FILE` prints class names (for a Kinetics-400 checkpoint, the
dataset's label file, e.g. PySlowFast's `kinetics_classnames.json`, a JSON
`{name: id}`); also read: `{id: name}` or a list in JSON, a CSV of `id,name`
rows, or one name per line; it must name `MODEL.NUM_CLASSES` classes. `--json`
prints one JSON object per video; `--checkpoint` names a checkpoint (a published Caffe2
`.pkl` with `TEST.CHECKPOINT_TYPE caffe2` and, for the BGR models,
`DATA.REVERSE_INPUT_CHANNEL True`, as `KEY VALUE` pairs after the videos). It
runs on a GPU when `NUM_GPUS` is above 0 and one is present. A missing
checkpoint, a video that does not open or a label file of another class count
is one `error:` line before the model is built.
"""


def config_paths() -> List[str]:
    """The configs, as paths relative to ``configs/``, published ones first."""
    paths = []
    for folder, _, files in os.walk(CONFIGS):
        for name in files:
            if name.endswith(".yaml"):
                paths.append(os.path.relpath(os.path.join(folder, name), CONFIGS))
    return sorted(paths, key=lambda p: (p.startswith("Demo/"), p))


def model_name(cfg: CfgNode) -> str:
    """A short name of the configured network, e.g. ``SlowFast R50 NL``."""
    arch = {"slowfast": "SlowFast", "slow": "Slow", "c2d": "C2D", "i3d": "I3D"}
    name = arch.get(cfg.MODEL.ARCH, cfg.MODEL.ARCH)
    name += f" R{cfg.RESNET.DEPTH}"
    if any(loc for pathway in cfg.NONLOCAL.LOCATION for loc in pathway):
        name += " NL"
    base_width = 64  # the standard ResNet's WIDTH_PER_GROUP
    if cfg.RESNET.WIDTH_PER_GROUP != base_width:
        name += f", width {cfg.RESNET.WIDTH_PER_GROUP}"
    return name


def training(cfg: CfgNode) -> str:
    """The recipe's multigrid cycles: ``baseline``, ``long``, ``short`` or both,
    and the frames of the coarsest long-cycle clip where it has 2 or fewer (the
    slow pathway's for SlowFast)."""
    switches = [
        ("long", cfg.MULTIGRID.LONG_CYCLE),
        ("short", cfg.MULTIGRID.SHORT_CYCLE),
    ]
    cycles = [name for name, on in switches if on]
    text = " + ".join(cycles) if cycles else "baseline"
    if cfg.MULTIGRID.LONG_CYCLE:
        factor = min(f[0] for f in cfg.MULTIGRID.LONG_CYCLE_FACTORS)
        frames = cfg.DATA.NUM_FRAMES * factor
        if cfg.MODEL.ARCH == "slowfast":
            slow = frames / cfg.SLOWFAST.ALPHA
            if slow <= 2:
                text += f" (coarsest clips: {frames:g} frames, {slow:g} slow)"
        elif frames <= 2:
            text += f" (coarsest clips: {frames:g} frame{'s' * (frames != 1)})"
    return text


def recipe(path: str, data: dict) -> str:
    """Whose recipe a full-size config is: the reference's, or ours from which."""
    base = data.get("ours", {}).get(path)
    return f"ours, from {base}" if base else "the reference's"


def model_key(cfg: CfgNode) -> str:
    """What decides the model and its test view: configs equal here share stats."""
    nodes = [cfg.MODEL, cfg.RESNET, cfg.SLOWFAST, cfg.NONLOCAL]
    view = (cfg.DATA.NUM_FRAMES, cfg.DATA.TEST_CROP_SIZE, cfg.DATA.INPUT_CHANNEL_NUM)
    return "".join(node.dump() for node in nodes) + repr(view)


def model_stats(cfg: CfgNode, cache: Dict[str, tuple]) -> tuple:
    """(parameters in millions, GFLOPs of one test view), cached by model."""
    key = model_key(cfg)
    if key not in cache:
        # Plain BN: the counts are the model's, whatever BN grouping training uses.
        plain = _with(cfg, ["BN.NORM_TYPE", "batchnorm"])
        model = build_model(plain, channels_last=False)
        frames, crop = cfg.DATA.NUM_FRAMES, cfg.DATA.TEST_CROP_SIZE
        cache[key] = (params_count(model) / 1e6, gflops(model, cfg, frames, crop))
    return cache[key]


def _with(cfg: CfgNode, opts: List[str]) -> CfgNode:
    clone = cfg.clone()
    clone.defrost()
    clone.merge_from_list(opts)
    clone.freeze()
    return clone


def _published(entry: Optional[dict]) -> List[str]:
    if not entry:
        return ["", ""]
    value = f"{entry['value']:.1f} {entry['metric']}"
    if entry.get("note"):
        value += f" ({entry['note']})"
    return [value, f"[checkpoint]({entry['checkpoint']})"]


def _expected(entry: Optional[dict]) -> List[str]:
    if not entry:
        return ["", ""]
    anchor = entry["benchmark"].lower().replace(" ", "-")
    anchor = "".join(c for c in anchor if c.isalnum() or c in "-_")
    link = f"{BENCHMARKS}/{entry['page']}#{anchor}"
    return [entry["expect"], f"[{entry['benchmark']}]({link})"]


DATA_DIRS = {
    "Kinetics": "/data/kinetics",
    "SSv2": "/data/ssv2",
    "Charades": "/data/charades",
}
LOAD_AS = {
    "caffe2_bgr": (
        "Caffe2 pickle of a BGR model",
        "TEST.CHECKPOINT_TYPE caffe2 DATA.REVERSE_INPUT_CHANNEL True",
        "loads: its keys are the reference's, checked by the tests; "
        "accuracy not measured here",
    ),
    "unknown": (
        "not known here: try Caffe2; a file that is not one says so, then "
        "try `TEST.CHECKPOINT_TYPE pytorch`",
        "TEST.CHECKPOINT_TYPE caffe2",
        "no: the file's format is not known here",
    ),
}
# What the tester's last line starts with, by the published metric.
EXPECT_LINE = {"mAP": "test mAP:", "top-1": "test accuracy: top-1"}
TEST_COMMAND = (
    "python tools/run_net.py --cfg configs/CONFIG TRAIN.ENABLE False \\\n"
    "    DATA.PATH_TO_DATA_DIR DATA DATA.PATH_PREFIX DATA \\\n"
    "    TEST.CHECKPOINT_FILE_PATH CHECKPOINT LOAD_OPTIONS"
)


def _testing_rows(data: dict) -> List[List[str]]:
    rows = []
    for path, entry in sorted(data["published"].items()):
        if entry.get("load") not in LOAD_AS:
            raise SystemExit(f"{DATA}: {path}: load must be one of {sorted(LOAD_AS)}")
        what, opts, verified = LOAD_AS[entry["load"]]
        line = EXPECT_LINE[entry["metric"]]
        expect = f"`{line}` about {entry['value']:.1f}% (PySlowFast's)"
        name = entry["checkpoint"].rsplit("/", 1)[-1]
        data_dir = DATA_DIRS[path.split("/")[0]]
        link = f"[{path}](../configs/{path})"
        rows.append([link, f"`{name}`", f"`{data_dir}`", what, f"`{opts}`"])
        rows[-1] += [expect, verified]
    return rows


def _table(headers: List[str], rows: List[List[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def render(data: dict) -> str:
    """The whole page, from every config and ``data`` (docs/model_zoo.yaml)."""
    unknown = sorted(set(data["published"]) | set(data["demo"]))
    unknown = [p for p in unknown if not os.path.isfile(os.path.join(CONFIGS, p))]
    if unknown:
        raise SystemExit(f"{DATA}: no config {', '.join(unknown)} under configs/")
    cache: Dict[str, tuple] = {}
    published, demo = [], []
    for path in config_paths():
        cfg = load_config([os.path.join(CONFIGS, path)])
        params, gflop = model_stats(cfg, cache)
        views = f"{cfg.TEST.NUM_ENSEMBLE_VIEWS} x {cfg.TEST.NUM_SPATIAL_CROPS}"
        row = [
            f"[{path}](../configs/{path})",
            model_name(cfg),
            training(cfg),
            f"{cfg.DATA.NUM_FRAMES} x {cfg.DATA.SAMPLING_RATE}",
            f"{views} @ {cfg.DATA.TEST_CROP_SIZE} px",
            f"{params:.2f}",
            f"{gflop:.2f}",
        ]
        if path.startswith("Demo/"):
            demo.append(row + _expected(data["demo"].get(path)))
        else:
            row.insert(1, recipe(path, data))
            published.append(row + _published(data["published"].get(path)))
    common = ["config", "model", "training", "frames x rate", "test views"]
    common += ["params (M)", "GFLOPs / view"]
    testing = ["config", "CHECKPOINT", "DATA", "load as", "LOAD_OPTIONS", "expect"]
    return "\n".join(
        [
            HEADER,
            "## Published configs (Kinetics-400, Something-Something V2, Charades)\n",
            _table(
                common[:1] + ["recipe"] + common[1:] + ["published", "checkpoint"],
                published,
            ),
            "\n## Testing a published checkpoint\n",
            "Download the checkpoint, prepare the dataset as DATASET.md says, then",
            "run this command with the row's values (the config's test views):\n",
            "```",
            TEST_COMMAND,
            "```\n",
            "The tester's last line starts as the row expects; the number is the",
            "reference's published one, and ours may differ by the decoding and",
            "resizing of the prepared data.\n",
            _table(testing + ["verified with this code"], _testing_rows(data)),
            PREDICT_SECTION.rstrip("\n"),
            "\n## Demo configs (generated Moving Digits data, CPU)\n",
            "What to expect, where measured: test accuracy on the generated data and",
            "the training wall-clock (2-core CPU unless it says otherwise), from the",
            "linked section of the benchmark pages. The other demo configs are",
            "checked by the tests to load, build and read their data.\n",
            _table(common + ["expect", "measured in"], demo),
            "",
        ]
    )


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    """Parses the command line (``--check``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if docs/MODEL_ZOO.md is stale"
    )
    return parser.parse_args(argv)


def main(argv: Optional[list] = None) -> int:
    args = parse_args(argv)
    with open(DATA) as f:
        data = yaml.safe_load(f)
    page = render(data)
    if args.check:
        current = open(OUTPUT).read() if os.path.isfile(OUTPUT) else ""
        if current != page:
            print(
                f"{OUTPUT} is stale: run python tools/dev/model_zoo.py", file=sys.stderr
            )
            return 1
        print(f"{OUTPUT} is up to date")
        return 0
    with open(OUTPUT, "w") as f:
        f.write(page)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
