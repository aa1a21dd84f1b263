"""The reference's Caffe2 model-zoo checkpoints (``.pkl``), loaded into our models.

A Caffe2 checkpoint is a Python 2 pickle of ``{"blobs": {name: numpy array}}``.
Blob names map to our state-dict keys by the reference's table (pathway 1
blobs start with ``t_``; BN ``_s``, ``_b``, ``_rm``, ``_riv`` are weight,
bias, running mean and running variance). As the reference loads them: a
blob with fewer dimensions than the model's tensor gets trailing 1s, a BN
statistic shorter by an exact factor is tiled, a blob whose shape still
differs is skipped with a warning (the 400-class classifier when fine-tuning
on another dataset), SGD state (``*_momentum``, ``lr``, ``model_iter``) is
ignored, and the model keys no blob filled are listed.
"""

import logging
import pickle
import re
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from iopath.common.file_io import g_pathmgr
from torch import nn

logger = logging.getLogger(__name__)

_BN = {"s": "weight", "b": "bias", "rm": "running_mean", "riv": "running_var"}
_PARAM = {"w": "weight", "b": "bias"}
_W = "(?P<param>w)"
_WB = "(?P<param>w|b)"
_S = "(?P<bn>s|b|rm|riv)"
_XY = r"(?P<x>\d)_(?P<y>\d+)"
# (pattern on the name without its "t_" prefix, key template); first match wins.
_RULES = [
    (f"^conv1_{_W}$", "s1.pathway{p}_stem.conv.{param}"),
    (f"^res_conv1_bn_{_S}$", "s1.pathway{p}_stem.bn.{bn}"),
    (f"^pool1_subsample_{_W}$", "s1_fuse.conv_f2s.{param}"),
    (f"^pool1_subsample_bn_{_S}$", "s1_fuse.bn.{bn}"),
    (f"^res{_XY}_branch2c_bn_subsample_{_W}$", "s{x}_fuse.conv_f2s.{param}"),
    (f"^res{_XY}_branch2c_bn_subsample_bn_{_S}$", "s{x}_fuse.bn.{bn}"),
    (f"^res{_XY}_branch1_{_W}$", "s{x}.pathway{p}_res{y}.branch1.{param}"),
    (f"^res{_XY}_branch1_bn_{_S}$", "s{x}.pathway{p}_res{y}.branch1_bn.{bn}"),
    (
        f"^res{_XY}_branch2(?P<k>[abc])_{_W}$",
        "s{x}.pathway{p}_res{y}.branch2.{k}.{param}",
    ),
    (
        f"^res{_XY}_branch2(?P<k>[abc])_bn_{_S}$",
        "s{x}.pathway{p}_res{y}.branch2.{k}_bn.{bn}",
    ),
    (
        f"^nonlocal_conv{_XY}_(?P<k>theta|phi|g|out)_{_WB}$",
        "s{x}.pathway{p}_nonlocal{y}.conv_{k}.{param}",
    ),
    (f"^nonlocal_conv{_XY}_bn_{_S}$", "s{x}.pathway{p}_nonlocal{y}.bn.{bn}"),
    (f"^pred_{_WB}$", "head.projection.{param}"),
]


def is_training_state(name: str) -> bool:
    """SGD state stored with the weights (ignored on load)."""
    return name.endswith("_momentum") or name in ("lr", "model_iter")


def blob_to_key(name: str) -> Optional[str]:
    """Our state-dict key of a Caffe2 blob name, or None when it maps to none.

    ``res4_5_branch2b_bn_riv`` -> ``s4.pathway0_res5.branch2.b_bn.running_var``;
    ``t_res3_0_branch1_w`` -> ``s3.pathway1_res0.branch1.weight``.
    """
    pathway = 1 if name.startswith("t_") else 0
    bare = name[2:] if pathway else name
    for pattern, template in _RULES:
        match = re.match(pattern, bare)
        if not match:
            continue
        values = match.groupdict()
        if "param" in values:
            values["param"] = _PARAM[values["param"]]
        if "bn" in values:
            values["bn"] = _BN[values["bn"]]
        return template.format(p=pathway, **values)
    return None


def read_blobs(path: str) -> Dict[str, np.ndarray]:
    """The blobs of a Caffe2 checkpoint (a Python 2 pickle)."""
    with g_pathmgr.open(path, "rb") as f:
        data = pickle.load(f, encoding="latin1")
    blobs = data.get("blobs", data) if isinstance(data, dict) else None
    if not isinstance(blobs, dict):
        raise ValueError(f"{path}: not a Caffe2 checkpoint (no 'blobs' dict)")
    return blobs


def _fit(blob: np.ndarray, target: torch.Tensor) -> Optional[torch.Tensor]:
    """The blob shaped as the reference shapes it for ``target``, or None."""
    tensor = torch.from_numpy(np.asarray(blob)).to(target.dtype)
    while tensor.dim() < target.dim():
        tensor = tensor.unsqueeze(-1)
    if tensor.dim() == 1 and target.dim() == 1 and tensor.numel() != target.numel():
        if tensor.numel() and target.numel() % tensor.numel() == 0:
            tensor = tensor.repeat(target.numel() // tensor.numel())
    return tensor if tensor.shape == target.shape else None


def convert_blobs(
    blobs: Dict[str, np.ndarray], model_state: Dict[str, torch.Tensor], path: str
) -> Tuple[Dict[str, torch.Tensor], List[str]]:
    """The state dict the blobs give a model, and the model keys left unfilled.

    Args:
        blobs: the checkpoint's blobs.
        model_state: the model's ``state_dict()`` (keys and shapes).
        path: the checkpoint (for the messages).
    """
    state: Dict[str, torch.Tensor] = {}
    unknown, mismatched = [], []
    for name, blob in sorted(blobs.items()):
        if is_training_state(name):
            continue
        key = blob_to_key(name)
        if key is None or key not in model_state:
            unknown.append(name)
            continue
        tensor = _fit(blob, model_state[key])
        if tensor is None:
            mismatched.append(
                f"{name} {tuple(np.shape(blob))} -> {key} "
                f"{tuple(model_state[key].shape)}"
            )
            continue
        state[key] = tensor
    if mismatched:
        logger.warning(
            "%s: %d blob(s) do not fit the model and are skipped (the classifier "
            "when the number of classes differs): %s",
            path,
            len(mismatched),
            "; ".join(mismatched[:4]),
        )
    if unknown:
        logger.warning(
            "%s: %d blob(s) match no key of the model: %s",
            path,
            len(unknown),
            ", ".join(unknown[:8]),
        )
    unfilled = [
        key
        for key in model_state
        if key not in state and not key.endswith("num_batches_tracked")
    ]
    if unfilled:
        logger.info(
            "%s: %d model key(s) keep their initial values: %s",
            path,
            len(unfilled),
            ", ".join(unfilled[:8]),
        )
    return state, unfilled


def load_caffe2_checkpoint(path: str, model: nn.Module) -> List[str]:
    """Loads a Caffe2 ``.pkl`` into ``model`` (unwrapped); returns the unfilled keys."""
    model_state = model.state_dict()
    state, unfilled = convert_blobs(read_blobs(path), model_state, path)
    model.load_state_dict(state, strict=False)
    logger.info("Loaded %d tensors from the Caffe2 checkpoint %s", len(state), path)
    return unfilled
