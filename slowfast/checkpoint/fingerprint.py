"""Whose a checkpoint is, and whether it is whole: run fingerprints and checksums.

A run's fingerprint is its config without the keys that do not change what
is trained: where outputs and data live, logging, checkpointing and resume
settings, testing, the processes per machine and loader workers (a run may
resume on another machine or number of GPUs per machine; NUM_SHARDS stays in,
as the global batch depends on it). A key present in one config only (one
written by another version) is not a difference. Checkpoints store its hash; auto-resume
refuses a checkpoint whose hash differs, naming the keys that differ. A
checkpoint also stores a checksum of its states (model, optimizer, scaler), so
that a flipped byte is found before the run resumes from it.
"""

import hashlib
import json
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

# Keys (or prefixes ending in ".") that do not define the run.
NOT_THE_RUN = (
    "OUTPUT_DIR",
    "IMPORTS",  # where the user's classes live; their names are the run's
    "LOG_PERIOD",
    "LOG_MODEL_INFO",
    "NUM_GPUS",
    "NUM_CPU_PROCS",
    "SHARD_ID",
    "DIST_BACKEND",
    "DIST_TIMEOUT_MINUTES",
    "DATA.PATH_TO_DATA_DIR",
    "DATA.PATH_PREFIX",
    "DATA.MAX_BAD_FRACTION",
    "DATA_LOADER.",
    "TENSORBOARD.",
    "TEST.",  # the test settings have their own fingerprint (test_settings)
    "MODEL.CHANNELS_LAST_3D",
    "TRAIN.ENABLE",
    "TRAIN.AUTO_RESUME",
    "TRAIN.EVAL_PERIOD",
    "TRAIN.CHECKPOINT_",
    "TRAIN.STOP_SIGNALS",
)


def flatten(node: Any, prefix: str = "") -> Dict[str, Any]:
    """A nested config as one level of dotted keys (``"SOLVER.BASE_LR"``)."""
    flat: Dict[str, Any] = {}
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = list(value) if isinstance(value, tuple) else value
    return flat


def _plain_flat(cfg: Any) -> Dict[str, Any]:
    # Through JSON: tuples and lists (a CfgNode's and a YAML file's) compare equal.
    return json.loads(json.dumps(flatten(cfg), default=str))


def run_definition(cfg: Any) -> Dict[str, Any]:
    """The config keys that define the run, flattened (``"SOLVER.BASE_LR"``).

    Args:
        cfg: a CfgNode, or a config dict (e.g. a checkpoint's YAML, loaded).
    """
    return {
        key: value
        for key, value in _plain_flat(cfg).items()
        if not any(
            key == skip or (skip.endswith((".", "_")) and key.startswith(skip))
            for skip in NOT_THE_RUN
        )
    }


def fingerprint(cfg: Any) -> str:
    """A short hash of ``run_definition(cfg)``."""
    text = json.dumps(run_definition(cfg), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def differences(
    ours: Any,
    theirs: Any,
    definition: Optional[Callable[[Any], Dict[str, Any]]] = None,
) -> List[Tuple[str, Any, Any]]:
    """The keys whose values differ between two configs' definitions.

    Args:
        ours, theirs: CfgNodes or config dicts.
        definition: ``run_definition`` (the default) or ``test_definition``.
    """
    definition = definition or run_definition
    a, b = definition(ours), definition(theirs)
    return [
        (key, a[key], b[key]) for key in sorted(set(a) & set(b)) if a[key] != b[key]
    ]


def state_checksum(*states: Any) -> str:
    """A SHA-256 of tensors and values, nested in dicts and lists, in key order."""
    digest = hashlib.sha256()

    def feed(obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            tensor = obj.detach().cpu().contiguous()
            digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().data)
        elif isinstance(obj, dict):
            for key in sorted(obj, key=str):
                digest.update(repr(key).encode())
                feed(obj[key])
        elif isinstance(obj, (list, tuple)):
            digest.update(f"[{len(obj)}]".encode())
            for item in obj:
                feed(item)
        else:
            digest.update(repr(obj).encode())

    for state in states:
        feed(state)
    return digest.hexdigest()


def cfg_from_dump(text: str) -> Dict[str, Any]:
    """A checkpoint's stored config (``cfg.dump()`` YAML) as a plain dict."""
    import yaml

    return (yaml.safe_load(text) or {}) if text else {}


def describe_differences(
    diffs: List[Tuple[str, Any, Any]], limit: int = 4, where: str = "the checkpoint"
) -> str:
    """``"SOLVER.BASE_LR 0.1 here, 0.2 in the checkpoint; ..."`` (a few)."""
    shown = [
        f"{key} {here!r} here, {there!r} in {where}"
        for key, here, there in diffs[:limit]
    ]
    more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return "; ".join(shown) + more


def test_definition(cfg: Any) -> Dict[str, Any]:
    """The config keys that decide a test's result: DATA.* and TEST.* but the
    test's batch size, rerun switch, on/off switch and output file, and
    TRAIN.MIXED_PRECISION (the test's forward pass runs under it) and, when
    it is on, TRAIN.MIXED_PRECISION_DTYPE, flattened.

    Args:
        cfg: a CfgNode, or a config dict (e.g. a run's config.yaml, loaded).
    """
    flat = _plain_flat(cfg)
    mixed = bool(flat.get("TRAIN.MIXED_PRECISION"))
    return {
        key: value
        for key, value in flat.items()
        if key == "TRAIN.MIXED_PRECISION"
        or (key == "TRAIN.MIXED_PRECISION_DTYPE" and mixed)
        or key.startswith(("TEST.", "DATA."))
        and key not in ("TEST.RERUN", "TEST.ENABLE", "TEST.SAVE_RESULTS_PATH")
        and not key.startswith("TEST.BATCH")
    }


def test_settings(cfg: Any) -> str:
    """A short hash of ``test_definition(cfg)``."""
    text = json.dumps(test_definition(cfg), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
