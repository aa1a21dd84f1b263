"""Values derived from the config that several parts of a run must agree on."""

from fvcore.common.config import CfgNode


def global_batch_size(cfg: CfgNode, split: str = "train") -> int:
    """The batch of all processes together, at the base shape.

    As in the reference, TRAIN.BATCH_SIZE and TEST.BATCH_SIZE are divided
    among the processes of one machine: a config run on NUM_SHARDS machines
    trains with NUM_SHARDS times that batch.

    Args:
        cfg: the run's config.
        split: "train" (TRAIN.BATCH_SIZE) or "val" / "test" (TEST.BATCH_SIZE).
    """
    batch = cfg.TRAIN.BATCH_SIZE if split == "train" else cfg.TEST.BATCH_SIZE
    return batch * cfg.NUM_SHARDS


def lr_scale(cfg: CfgNode) -> int:
    """The factor of every SOLVER learning rate: NUM_SHARDS when
    SOLVER.BASE_LR_SCALE_NUM_SHARDS (as the reference), else 1."""
    return cfg.NUM_SHARDS if cfg.SOLVER.BASE_LR_SCALE_NUM_SHARDS else 1
