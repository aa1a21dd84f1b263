#!/usr/bin/env python3
r"""Times our models against the reference implementation's, stepping in turns.

For each config, the reference's model (PySlowFast's ``slowfast`` package,
from a folder given by ``--reference``) and ours are built from the same YAML
and run alternately in one process: a training step (forward, cross-entropy,
backward, SGD with the config's momentum and weight decay) at
TRAIN_CROP_SIZE, then inference at TEST_CROP_SIZE, round after round. Ours
takes uint8 clips, as our loader feeds it (the model normalises them); the
reference takes float clips normalised beforehand, as its loader feeds it.
The table gives medians over the timed rounds and the reference's time over
ours (above 1: ours is faster), per memory format of ours (``default`` is
what a run picks, ``slowfast/models/memory_format.py``) and per
precision of ours (``--precision fp32,bf16``: bf16 is ``TRAIN.MIXED_PRECISION
True``, bf16 autocast as our trainer and tester run it on CPU; off by default.
The reference, PySlowFast 1.0, has no mixed precision: it runs fp32).

The reference package and ours are both named ``slowfast``: the reference's
models are built first, its modules are then dropped from ``sys.modules``,
and ours are imported. Its config reads only the keys it knows (the others
are listed); without detectron2 installed, ``detectron2.layers`` is stubbed
(only the reference's detection head uses it). Tested with the reference
published on PyPI as ``pyslowfast`` 1.0 (its models have our parameter
counts and state-dict shapes):

    pip download --no-deps pyslowfast==1.0 -d /tmp/ref
    unzip -q /tmp/ref/pyslowfast-1.0-py3-none-any.whl -d /tmp/ref/pyslowfast
    python tools/dev/benchmark_reference.py --reference /tmp/ref/pyslowfast \
        --cfg configs/Kinetics/I3D_8x8_R50.yaml --batch 2 --iters 3 \
        --memory-format contiguous,channels_last_3d --precision fp32,bf16
"""

import argparse
import ast
import contextlib
import importlib
import importlib.util
import json
import os
import statistics
import sys
import time
import types
from typing import Dict, List

import torch
import yaml

MODES = ("train", "eval")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", required=True, help="folder holding its slowfast")
    p.add_argument("--cfg", nargs="+", required=True, help="YAML config file(s)")
    p.add_argument("--batch", type=int, default=2, help="clips per step")
    p.add_argument("--iters", type=int, default=3, help="timed rounds")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument(
        "--memory-format",
        default="default",
        help="formats of ours, comma-separated: default, contiguous, channels_last_3d",
    )
    p.add_argument(
        "--precision",
        default="fp32",
        help="precisions of ours, comma-separated: fp32, bf16 (mixed precision)",
    )
    p.add_argument("--json", help="also write the table's rows to this file")
    args = p.parse_args(argv)
    args.formats = args.memory_format.split(",")
    args.precisions = args.precision.split(",")
    for precision in args.precisions:
        if precision not in ("fp32", "bf16"):
            p.error(f"--precision {precision!r}: use fp32 or bf16")
    for fmt in args.formats:
        if fmt not in ("default", "contiguous", "channels_last_3d"):
            p.error(
                f"--memory-format {fmt!r}: use default, contiguous or channels_last_3d"
            )
    for path in args.cfg:
        if not os.path.isfile(path):
            p.error(f"--cfg {path}: no such file")
    if not os.path.isdir(os.path.join(args.reference, "slowfast")):
        p.error(f"--reference {args.reference}: no slowfast package folder in it")
    args.reference = os.path.abspath(args.reference)
    return args


def _merge_known(node, values: dict, skipped: list, prefix: str = "") -> None:
    """Sets the YAML's values on the reference's config; lists unknown keys."""
    for key, value in values.items():
        if key not in node:
            skipped.append(prefix + key)
        elif isinstance(value, dict):
            _merge_known(node[key], value, skipped, prefix + key + ".")
        else:
            if isinstance(value, str) and not isinstance(node[key], str):
                value = ast.literal_eval(value)  # e.g. 1e-4, a string in YAML
            node[key] = value


def _read_yaml(path: str) -> dict:
    """The YAML's values, its ``_BASE_`` chain resolved (the file wins)."""
    with open(path) as f:
        values = yaml.safe_load(f) or {}
    base = values.pop("_BASE_", None)
    if base is None:
        return values
    merged = _read_yaml(os.path.join(os.path.dirname(path), base))
    _update(merged, values)
    return merged


def _update(into: dict, values: dict) -> None:
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _update(into[key], value)
        else:
            into[key] = value


def build_reference_models(root: str, paths: list) -> list:
    """Builds the reference's model of every config on the CPU.

    Returns:
        list: ``(model, reference config, skipped keys)`` per config.
    """
    if importlib.util.find_spec("detectron2") is None:
        layers = types.ModuleType("detectron2.layers")
        # typeshed's ModuleType has no attributes to set; any module takes them.
        layers.ROIAlign = None  # type: ignore[attr-defined]
        sys.modules["detectron2"] = types.ModuleType("detectron2")
        sys.modules["detectron2.layers"] = layers
    sys.path.insert(0, root)
    try:
        defaults = importlib.import_module("slowfast.config.defaults")
        if not (defaults.__file__ or "").startswith(root):
            sys.exit(f"--reference {root}: no slowfast package there")
        models = []
        for path in paths:
            cfg = defaults.get_cfg()
            skipped: List[str] = []
            _merge_known(cfg, _read_yaml(path), skipped)
            cfg.NUM_GPUS = 0
            models.append((_build_reference(cfg), cfg, skipped))
    finally:
        sys.path.remove(root)
        for name in [m for m in sys.modules if m.split(".")[0] == "slowfast"]:
            del sys.modules[name]
    return models


def _build_reference(cfg):
    try:  # later PySlowFast: a registry
        build = importlib.import_module("slowfast.models.build")
        return build.MODEL_REGISTRY.get(cfg.MODEL.MODEL_NAME)(cfg)
    except ModuleNotFoundError:  # 1.0: a dict of architectures
        builder = importlib.import_module("slowfast.models.model_builder")
        return builder._MODEL_TYPES[cfg.MODEL.ARCH](cfg)


def clip_inputs(cfg, batch: int, crop: int, seed: int) -> tuple:
    """(uint8 pathways for ours, normalised float pathways for the reference),
    packed and normalised as our loader and model do it."""
    from slowfast.datasets.transforms import pack_pathways
    from slowfast.models import describe_model
    from slowfast.models.input_norm import InputNormalizer

    gen = torch.Generator().manual_seed(seed)
    size = (batch, 3, cfg.DATA.NUM_FRAMES, crop, crop)
    clips = torch.randint(0, 256, size, generator=gen).to(torch.uint8)
    info = describe_model(cfg)
    per_clip = [pack_pathways(c, info.num_pathways > 1, info.alpha) for c in clips]
    ours = [torch.stack(p) for p in zip(*per_clip)]
    norm = InputNormalizer(cfg.DATA.MEAN, cfg.DATA.STD)
    return ours, [norm(x) for x in ours]


class Stepper:
    """Training step and inference of one model on fixed inputs.

    Args:
        model: the model, on the CPU.
        cfg: its config (SOLVER.MOMENTUM and WEIGHT_DECAY for the SGD step).
        train_in: pathway tensors of a training step.
        eval_in: pathway tensors of an inference step.
        labels: class indices of the training clips.
        autocast: returns the forward pass's precision context.
    """

    def __init__(
        self, model, cfg, train_in, eval_in, labels, autocast=contextlib.nullcontext
    ) -> None:
        self.model = model
        self.autocast = autocast
        self.train_in, self.eval_in, self.labels = train_in, eval_in, labels
        self.opt = torch.optim.SGD(
            model.parameters(),
            lr=1e-3,
            momentum=cfg.SOLVER.MOMENTUM,
            weight_decay=cfg.SOLVER.WEIGHT_DECAY,
        )

    def __call__(self, mode: str) -> float:
        """Runs one ``"train"`` or ``"eval"`` step; returns its seconds."""
        start = time.perf_counter()
        if mode == "train":
            self.model.train()
            # A fresh list: the reference's forward assigns into its input list.
            with self.autocast():
                out = self.model(list(self.train_in))
            loss = torch.nn.functional.cross_entropy(out.float(), self.labels)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        else:
            self.model.eval()
            with torch.no_grad(), self.autocast():
                self.model(list(self.eval_in))
        return time.perf_counter() - start


def time_in_turns(steppers: list, rounds: int, warmup: int) -> list:
    """Seconds per (stepper, mode), stepping every stepper in turn each round."""
    times: List[Dict[str, List[float]]] = [{m: [] for m in MODES} for _ in steppers]
    for r in range(warmup + rounds):
        for mode in MODES:
            for i, step in enumerate(steppers):
                dt = step(mode)
                if r >= warmup:
                    times[i][mode].append(dt)
    return times


def _spread(values: list) -> float:
    return 100 * (max(values) - min(values)) / statistics.median(values)


def build_ours(path: str, formats: list) -> dict:
    """Our model of a config in each memory format, by table label."""
    from slowfast.launch.config import load_run_config
    from slowfast.models import build_model, describe_model
    from slowfast.models.memory_format import choose_channels_last

    models = {}
    for fmt in formats:
        opts = ["NUM_GPUS", "0"]
        if fmt != "default":
            opts += ["MODEL.CHANNELS_LAST_3D", str(fmt == "channels_last_3d")]
        cfg = load_run_config([path], opts)
        if fmt == "default":
            fast = choose_channels_last(cfg, describe_model(cfg))
            picked = "channels_last_3d" if fast else "contiguous"
            fmt = f"default: {picked}"
        models[fmt] = build_model(cfg, choose_channels_last(cfg, describe_model(cfg)))
    return models


def _autocast(path: str, precision: str):
    """Our trainer's forward-pass context for ``precision`` on the CPU."""
    from slowfast.engine.precision import autocast_factory
    from slowfast.launch.config import load_run_config

    mixed = str(precision == "bf16")
    cfg = load_run_config([path], ["NUM_GPUS", "0", "TRAIN.MIXED_PRECISION", mixed])
    return autocast_factory(cfg, torch.device("cpu"))


def compare(path: str, reference: tuple, args: argparse.Namespace) -> list:
    """Times the reference's model and ours on one config; returns table rows."""
    from slowfast.launch.config import load_run_config

    ref, ref_cfg, skipped = reference
    cfg = load_run_config([path], ["NUM_GPUS", "0"])
    ours = build_ours(path, args.formats)
    autocasts = {p: _autocast(path, p) for p in args.precisions}
    variants = {}  # table label -> (model, autocast)
    for fmt, model in ours.items():
        for precision, autocast in autocasts.items():
            label = fmt if precision == "fp32" else f"{fmt}, bf16"
            variants[label] = (model, autocast)
    n_ref = sum(p.numel() for p in ref.parameters())
    n_ours = sum(p.numel() for p in next(iter(ours.values())).parameters())
    print(f"{path}: parameters reference {n_ref:,}, ours {n_ours:,}")
    if skipped:
        print(f"  keys the reference's config lacks: {', '.join(skipped)}")
    labels = torch.randint(cfg.MODEL.NUM_CLASSES, (args.batch,))
    crops = {"train": cfg.DATA.TRAIN_CROP_SIZE, "eval": cfg.DATA.TEST_CROP_SIZE}
    train_u8, train_f = clip_inputs(cfg, args.batch, crops["train"], 1)
    eval_u8, eval_f = clip_inputs(cfg, args.batch, crops["eval"], 2)
    steppers = [Stepper(ref, ref_cfg, train_f, eval_f, labels)]
    steppers += [
        Stepper(m, cfg, train_u8, eval_u8, labels, autocast)
        for m, autocast in variants.values()
    ]
    times = time_in_turns(steppers, args.iters, args.warmup)
    rows = []
    for mode in MODES:
        ref_s = statistics.median(times[0][mode])
        for label, t in zip(variants, times[1:]):
            ours_s = statistics.median(t[mode])
            rows.append(
                [os.path.basename(path), mode, crops[mode], label, 1000 * ref_s,
                 _spread(times[0][mode]), 1000 * ours_s, _spread(t[mode]),
                 ref_s / ours_s]
            )  # fmt: skip
    return rows


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    references = build_reference_models(args.reference, args.cfg)
    from slowfast.utils.table import format_table

    rows = []
    for path, reference in zip(args.cfg, references):
        rows += compare(path, reference, args)
    headers = ["config", "step", "crop", "ours: format", "reference ms"]
    headers += ["spread %", "ours ms", "spread %", "reference / ours"]
    print(
        f"\nReference vs ours on CPU, batch {args.batch}, {args.threads} threads, "
        f"in turns; median of {args.iters} rounds after {args.warmup} "
        "(train: forward + backward + SGD; eval: forward, no grad):"
    )
    print(format_table(headers, rows, float_fmt=".2f"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"headers": headers, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
