"""The memory format a model is built in: the caller decides, the model obeys.

``build_model(cfg, channels_last=...)`` sets the model's weights in
``torch.channels_last_3d`` or the contiguous format, and the models' forward
converts their inputs to it (``stem.prepare_pathways``). Inside the models
the choice is read from MODEL.CHANNELS_LAST_3D alone (None: contiguous); the
default for a run, which depends on the device, the model's width and the
run's BN grouping, is decided by the engine
(``slowfast.engine.memory_format.choose_channels_last``) and passed in.
"""

from typing import Optional

from fvcore.common.config import CfgNode


def uses_channels_last_3d(cfg: CfgNode) -> bool:
    """Whether the model of ``cfg`` runs in ``torch.channels_last_3d``.

    Args:
        cfg: a config whose MODEL.CHANNELS_LAST_3D says it (None: contiguous).

    Returns:
        bool: True for channels-last weights and inputs.
    """
    return bool(cfg.MODEL.CHANNELS_LAST_3D)


def with_memory_format(cfg: CfgNode, channels_last: Optional[bool]) -> CfgNode:
    """``cfg`` with MODEL.CHANNELS_LAST_3D set (a copy), or ``cfg`` for None."""
    if channels_last is None or cfg.MODEL.CHANNELS_LAST_3D == channels_last:
        return cfg
    cfg = cfg.clone()
    cfg.defrost()
    cfg.MODEL.CHANNELS_LAST_3D = bool(channels_last)
    cfg.freeze()
    return cfg
