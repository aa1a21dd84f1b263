"""Fitting a checkpoint's state dict to a model: key clean-up, inflation, checks.

Pure functions on state dicts (no files, no errors of their own beyond
ValueError); ``slowfast.checkpoint.load`` turns their findings into
``CheckpointError`` messages naming the file.

Inflation turns a 2D kernel ``w`` (O, I, H, W) into the 3D kernel ``w / T``
repeated along a new temporal axis of length T, so that on a static video
(every frame the same) the 3D convolution gives the 2D convolution's response
at each output frame whose temporal window lies inside the clip.
"""

import logging
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import torch

logger = logging.getLogger(__name__)

# How many offending keys a mismatch description lists per kind.
MAX_LISTED = 5
_DDP_PREFIX = "module."
# The classifier's keys (the reference's head names): the one part of a model
# trained on another dataset that cannot fit, and that fine-tuning replaces.
CLASSIFIER_KEYS = ("head.projection.weight", "head.projection.bias")


def normalize_keys(
    state: Mapping[str, Any], clear_name_pattern: Iterable[str] = ()
) -> Dict[str, Any]:
    """Strips leading ``module.`` prefixes (DDP) and removes given substrings.

    Args:
        state: a state dict as saved.
        clear_name_pattern: substrings removed from every key, in order.

    Returns:
        dict: the state dict with cleaned keys, same values and order.

    Raises:
        ValueError: two keys become the same key.
    """
    patterns = [p for p in clear_name_pattern if p]
    renamed: Dict[str, Any] = {}
    for key, value in state.items():
        new_key = key
        while new_key.startswith(_DDP_PREFIX):
            new_key = new_key[len(_DDP_PREFIX) :]
        for pattern in patterns:
            new_key = new_key.replace(pattern, "")
        if new_key in renamed:
            raise ValueError(
                f"key {key!r} becomes {new_key!r}, which another key already "
                "became (check TRAIN.CHECKPOINT_CLEAR_NAME_PATTERN)"
            )
        renamed[new_key] = value
    return renamed


def inflate_weight(weight_2d: torch.Tensor, temporal_size: int) -> torch.Tensor:
    """Inflates one 2D kernel along time.

    Args:
        weight_2d: shape (O, I, H, W) or (O, I, 1, H, W).
        temporal_size: T, the 3D kernel's temporal size.

    Returns:
        Tensor: shape (O, I, T, H, W), the 2D kernel repeated T times over T.
    """
    if weight_2d.dim() == 4:
        weight_2d = weight_2d.unsqueeze(2)
    if weight_2d.dim() != 5 or weight_2d.shape[2] != 1:
        raise ValueError(
            f"cannot inflate a kernel of shape {tuple(weight_2d.shape)} along time"
        )
    return weight_2d.repeat(1, 1, temporal_size, 1, 1) / temporal_size


def is_inflatable(saved: Any, target: Any) -> bool:
    """Tells whether ``saved`` is the 2D counterpart of the 3D kernel ``target``.

    Args:
        saved: a checkpoint tensor, (O, I, H, W) or (O, I, 1, H, W).
        target: the model's tensor, (O, I, T, H, W) with T > 1.

    Returns:
        bool: True when ``saved`` inflates to ``target``'s shape.
    """
    if not (isinstance(saved, torch.Tensor) and isinstance(target, torch.Tensor)):
        return False
    if target.dim() != 5 or target.shape[2] <= 1:
        return False
    expected_2d = target.shape[:2] + target.shape[3:]
    if saved.dim() == 4:
        return saved.shape == expected_2d
    if saved.dim() == 5 and saved.shape[2] == 1:
        return saved.shape[:2] + saved.shape[3:] == expected_2d
    return False


def inflate_state_dict(
    state: Mapping[str, Any], model_state: Mapping[str, Any]
) -> Tuple[Dict[str, Any], List[str]]:
    """Inflates the 2D kernels of ``state`` that are 3D in ``model_state``.

    Every other entry (and every key the model lacks) is passed through
    unchanged; the caller checks that the result matches the model.

    Args:
        state: the checkpoint's state dict (2D or partly 2D kernels).
        model_state: the 3D model's state dict (only shapes are used).

    Returns:
        (dict, list[str]): the new state dict and the names of inflated keys.
    """
    inflated: Dict[str, Any] = {}
    names: List[str] = []
    for key, value in state.items():
        target = model_state.get(key)
        if target is not None and is_inflatable(value, target):
            inflated[key] = inflate_weight(value, target.shape[2]).to(target.dtype)
            names.append(key)
            logger.debug(
                "Inflated %s: %s -> %s", key, tuple(value.shape), tuple(target.shape)
            )
        else:
            inflated[key] = value
    logger.info("Inflated %d 2D kernels to 3D", len(names))
    return inflated, names


def listed(items: List[str]) -> str:
    """The first ``MAX_LISTED`` items, comma-separated, and how many more."""
    more = len(items) - MAX_LISTED
    return ", ".join(items[:MAX_LISTED]) + (f", ... ({more} more)" if more > 0 else "")


def _shape(value: Any) -> tuple:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else ()


def describe_mismatch(
    state: Mapping[str, Any], model_state: Mapping[str, Any], inflation: bool = False
) -> Optional[str]:
    """Describes how ``state`` differs from the model's keys and shapes.

    Args:
        state: the (cleaned, possibly inflated) checkpoint state dict.
        model_state: the model's state dict.
        inflation: inflation was already applied (no inflation hint then).

    Returns:
        str | None: one line listing the first missing keys, unexpected keys
        and shape mismatches (``key: checkpoint (..) vs model (..)``), or None
        when the keys and shapes agree exactly.
    """
    missing = [k for k in model_state if k not in state]
    unexpected = [k for k in state if k not in model_state]
    mismatched = [
        k
        for k in model_state
        if k in state
        and isinstance(model_state[k], torch.Tensor)
        and _shape(state[k]) != _shape(model_state[k])
    ]
    if not (missing or unexpected or mismatched):
        return None
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing keys: {listed(missing)}")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected keys: {listed(unexpected)}")
    if mismatched:
        shapes = [
            f"{k}: checkpoint {_shape(state[k])} vs model {_shape(model_state[k])}"
            for k in mismatched
        ]
        parts.append(f"{len(mismatched)} shape mismatches: {listed(shapes)}")
    text = "; ".join(parts)
    if not (inflation or missing or unexpected) and any(
        is_inflatable(state[k], model_state[k]) for k in mismatched
    ):
        text += " (a 2D checkpoint? set TRAIN.CHECKPOINT_INFLATE True to inflate it)"
    elif not (missing or unexpected) and set(mismatched) <= set(CLASSIFIER_KEYS):
        classes = _shape(state[mismatched[0]])[0]
        text += (
            f" (a classifier for {classes} classes: set MODEL.NUM_CLASSES {classes}, "
            "or to fine-tune from it TRAIN.CHECKPOINT_EPOCH_RESET True, which "
            "initialises the classifier afresh)"
        )
    return text


def keep_model_classifier(
    state: Dict[str, Any], model_state: Mapping[str, Any]
) -> List[str]:
    """Keeps the model's own classifier where the checkpoint's does not fit.

    Where the checkpoint's classifier has another shape (another dataset's
    classes), the model's tensors go into ``state``, as fine-tuning wants.

    Args:
        state: the checkpoint state dict, changed in place.
        model_state: the model's state dict.

    Returns:
        list: ``key: checkpoint (..) vs model (..)`` for each key replaced.
    """
    kept = []
    for key in CLASSIFIER_KEYS:
        if key in state and key in model_state:
            if _shape(state[key]) != _shape(model_state[key]):
                kept.append(
                    f"{key}: checkpoint {_shape(state[key])} vs model "
                    f"{_shape(model_state[key])}"
                )
                state[key] = model_state[key]
    return kept
