"""The reference's Caffe2 model-zoo checkpoints (``.pkl``), loaded into our models.

A Caffe2 checkpoint is a Python 2 pickle of ``{"blobs": {name: numpy array}}``.
Blob names map to our state-dict keys by the reference's table (pathway 1
blobs start with ``t_``; BN ``_s``, ``_b``, ``_rm``, ``_riv`` are weight,
bias, running mean and running variance). As the reference fits them: a
blob with fewer dimensions than the model's tensor gets trailing 1s, a BN
statistic shorter by an exact factor is tiled, and SGD state
(``*_momentum``, ``lr``, ``model_iter``) is ignored.

Unlike the reference, which skips what does not fit and loads the rest, the
blobs load only when they fill the whole model, as a ``.pyth`` loads: a
checkpoint of another architecture (I3D blobs into an I3D-NL model, say) is
refused in one line. Only fine-tuning may leave the classifier out (another
dataset's classes); blobs the reference's table does not name are ignored
with a warning, as the reference does.
"""

import logging
import pickle
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np
import torch
from iopath.common.file_io import g_pathmgr
from torch import nn

from slowfast.checkpoint.inflate import CLASSIFIER_KEYS, listed

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


def _fit(blob: np.ndarray, key: str, target: torch.Tensor) -> Optional[torch.Tensor]:
    """The blob shaped as the reference shapes it for ``target``, or None."""
    tensor = torch.from_numpy(np.asarray(blob)).to(target.dtype)
    while tensor.dim() < target.dim():
        tensor = tensor.unsqueeze(-1)
    statistic = key.endswith(("running_mean", "running_var"))
    if statistic and tensor.dim() == 1 and tensor.numel() != target.numel():
        if tensor.numel() and target.numel() % tensor.numel() == 0:
            tensor = tensor.repeat(target.numel() // tensor.numel())
    return tensor if tensor.shape == target.shape else None


@dataclass(frozen=True)
class Misfit:
    """A blob whose shape does not fit its model key."""

    blob: str
    blob_shape: tuple
    key: str
    model_shape: tuple

    def __str__(self) -> str:
        return f"{self.blob} {self.blob_shape} -> {self.key} {self.model_shape}"


@dataclass
class Conversion:
    """What the blobs of a Caffe2 checkpoint give a model.

    Attributes:
        state: the tensors that fit, by model key.
        misfits: the blobs of another shape, by model key.
        absent: ``blob -> key`` for blobs of a part the model does not have.
        unknown: blobs whose names the reference's table does not map.
        unfilled: the model keys no blob filled (``num_batches_tracked`` aside).
    """

    state: Dict[str, torch.Tensor] = field(default_factory=dict)
    misfits: Dict[str, Misfit] = field(default_factory=dict)
    absent: List[str] = field(default_factory=list)
    unknown: List[str] = field(default_factory=list)
    unfilled: List[str] = field(default_factory=list)


def convert_blobs(
    blobs: Dict[str, np.ndarray], model_state: Dict[str, torch.Tensor]
) -> Conversion:
    """Maps the blobs onto the model's keys and shapes (nothing is loaded).

    Args:
        blobs: the checkpoint's blobs.
        model_state: the model's ``state_dict()`` (keys and shapes).

    Returns:
        Conversion: the tensors that fit, and every blob and key that does not.
    """
    out = Conversion()
    for name, blob in sorted(blobs.items()):
        if is_training_state(name):
            continue
        key = blob_to_key(name)
        if key is None:
            out.unknown.append(name)
        elif key not in model_state:
            out.absent.append(f"{name} -> {key}")
        elif (tensor := _fit(blob, key, model_state[key])) is None:
            shape = tuple(model_state[key].shape)
            out.misfits[key] = Misfit(name, tuple(np.shape(blob)), key, shape)
        else:
            out.state[key] = tensor
    out.unfilled = [
        key
        for key in model_state
        if key not in out.state and not key.endswith("num_batches_tracked")
    ]
    return out


def new_classifier_keys(conversion: Conversion) -> List[str]:
    """The classifier keys whose blobs are of another shape (another dataset's
    classes), when the blobs fit everything else; else none."""
    misfit = [k for k in CLASSIFIER_KEYS if k in conversion.misfits]
    return misfit if set(conversion.misfits) <= set(misfit) else []


def describe_conversion_mismatch(
    conversion: Conversion, new_classifier: bool
) -> Optional[str]:
    """One line on how the blobs fail to fit the model, or None when they fit.

    Every model key must be filled by a blob of its shape, and no blob may
    belong to a part the model lacks, as a ``.pyth`` loads; only with
    ``new_classifier`` (fine-tuning) may a classifier of another shape be left
    out.

    Args:
        conversion: ``convert_blobs``'s result.
        new_classifier: a classifier blob of another shape is allowed.

    Returns:
        str | None: the unfilled keys, the blobs of parts the model lacks and
        the blobs of another shape (the first of each), with what to do.
    """
    new_keys = new_classifier_keys(conversion)
    skip = set(new_keys) if new_classifier else set()
    unfilled = [
        k for k in conversion.unfilled if k not in skip and k not in conversion.misfits
    ]
    misfits = [str(m) for k, m in conversion.misfits.items() if k not in skip]
    parts = []
    if unfilled:
        parts.append(f"{len(unfilled)} model keys no blob fills: {listed(unfilled)}")
    if conversion.absent:
        parts.append(
            f"{len(conversion.absent)} blobs for parts the model lacks: "
            f"{listed(conversion.absent)}"
        )
    if misfits:
        parts.append(f"{len(misfits)} blobs of another shape: {listed(misfits)}")
    if not parts:
        return None
    text = "; ".join(parts)
    if not unfilled and not conversion.absent and new_keys:
        classes = conversion.misfits[new_keys[0]].blob_shape[0]
        return text + (
            f" (a classifier for {classes} classes: set MODEL.NUM_CLASSES {classes}, "
            "or fine-tune from it with TRAIN.CHECKPOINT_TYPE caffe2)"
        )
    return text + (
        " (a checkpoint of another model? use the config it was trained with: "
        "MODEL.*, RESNET.*, NONLOCAL.*, SLOWFAST.*)"
    )


def load_caffe2_checkpoint(
    path: str, model: nn.Module, new_classifier: bool = False
) -> Optional[str]:
    """Loads a Caffe2 ``.pkl`` into ``model`` (unwrapped) when its blobs fit.

    Args:
        path: the checkpoint.
        model: the model to fill.
        new_classifier: fine-tuning: a classifier blob of another shape
            leaves the model's classifier as initialised, with a warning.

    Returns:
        str | None: None when loaded; otherwise the mismatch
        (``describe_conversion_mismatch``), and the model is left unchanged.
    """
    model_state = model.state_dict()
    conversion = convert_blobs(read_blobs(path), model_state)
    mismatch = describe_conversion_mismatch(conversion, new_classifier)
    if mismatch:
        return mismatch
    if conversion.unknown:
        logger.warning(
            "%s: %d blob(s) the reference's table does not name are ignored: %s",
            path,
            len(conversion.unknown),
            listed(conversion.unknown),
        )
    state = conversion.state
    new_keys = new_classifier_keys(conversion)
    for key in new_keys:
        misfit = conversion.misfits[key]
        logger.warning("%s: classifier left as initialised (%s)", path, misfit)
    if new_keys:  # none of another dataset's classifier, not even a bias that fits
        state = {k: v for k, v in state.items() if k not in CLASSIFIER_KEYS}
    model.load_state_dict(state, strict=False)
    logger.info("Loaded %d tensors from the Caffe2 checkpoint %s", len(state), path)
    return None
