"""Value checks on a merged config, each failing with one line naming the key.

Names that registries own (models, datasets, losses, optimizers, LR policies)
are checked by the registries themselves, passed to ``load_config`` as checks
(``slowfast.launch.config.load_run_config``): the config layer imports none of
them.
"""

from fvcore.common.config import CfgNode

from slowfast.config.derived import parse_signals

# MULTIGRID.JITTER_SCALE_MODE (see datasets.grid.jitter_scales).
JITTER_SCALE_MODES = ("resample", "lower_bound")

_CHOICES = {
    "MODEL.ARCH": ("c2d", "i3d", "slow", "slowfast"),
    "MODEL.HEAD_ACT": ("softmax", "sigmoid", "none"),
    "BN.NORM_TYPE": ("batchnorm", "sub_batchnorm", "sync_batchnorm"),
    "DATA.ENSEMBLE_METHOD": ("sum", "max"),
    "DATA.DECODING_BACKEND": ("pyav", "frames"),
    "RESNET.TRANS_FUNC": ("bottleneck_transform", "basic_transform"),
    "RESNET.DEPTH": (18, 50, 101, 152),
    "NONLOCAL.INSTANTIATION": ("dot_product", "softmax"),
    "MULTIGRID.SHORT_CYCLE_CROP_MODE": ("absolute", "relative"),
    "MULTIGRID.JITTER_SCALE_MODE": JITTER_SCALE_MODES,
    "TRAIN.CHECKPOINT_TYPE": ("pytorch", "caffe2"),
    "TEST.CHECKPOINT_TYPE": ("pytorch", "caffe2"),
    "TRAIN.MIXED_PRECISION_DTYPE": ("auto", "bf16", "fp16"),
    "BN.SPLIT_KERNELS": ("auto", "triton", "native"),
    "TEST.NUM_SPATIAL_CROPS": (1, 3),
    "SLOWFAST.SLOW_SAMPLING": ("linspace", "stride"),
}

_POSITIVE = (
    "TRAIN.BATCH_SIZE",
    "TEST.BATCH_SIZE",
    "TRAIN.CHECKPOINT_PERIOD",
    "TEST.NUM_ENSEMBLE_VIEWS",
    "DATA.NUM_FRAMES",
    "DATA.SAMPLING_RATE",
    "DATA.TRAIN_CROP_SIZE",
    "DATA.TEST_CROP_SIZE",
    "SOLVER.MAX_EPOCH",
    "MODEL.NUM_CLASSES",
    "NUM_SHARDS",
    "NUM_CPU_PROCS",
    "LOG_PERIOD",
    "BN.NUM_SPLITS",
    "BN.NUM_SYNC_DEVICES",
    "MULTIGRID.BN_BASE_SIZE",
    "SLOWFAST.ALPHA",
    "SLOWFAST.BETA_INV",
    "RESNET.NUM_GROUPS",
    "RESNET.WIDTH_PER_GROUP",
)


# Reference keys kept so that reference configs load, which nothing reads:
# what does their job here.
UNREAD_KEYS = {
    "SOLVER.WARMUP_FACTOR": "SOLVER.WARMUP_START_LR sets the warm-up's first LR",
    "MULTIGRID.EVAL_FREQ": (
        "TRAIN.EVAL_PERIOD and CHECKPOINT_PERIOD set when to validate and save, "
        "in baseline epochs of training"
    ),
    "MULTIGRID.DEFAULT_B": "the schedule derives it from TRAIN.BATCH_SIZE",
    "MULTIGRID.DEFAULT_T": "the schedule derives it from DATA.NUM_FRAMES",
    "MULTIGRID.DEFAULT_S": "the schedule derives it from DATA.TRAIN_CROP_SIZE",
    "MODEL.SINGLE_PATHWAY_ARCH": "MODEL.ARCH and the model's registry entry decide",
    "MODEL.MULTI_PATHWAY_ARCH": "MODEL.ARCH and the model's registry entry decide",
}


def unread_keys_set(cfg: CfgNode, defaults: CfgNode) -> list:
    """One line per key of ``UNREAD_KEYS`` set to another value than its default."""
    return [
        f"{key} = {_get(cfg, key)!r} has no effect here: {why}"
        for key, why in UNREAD_KEYS.items()
        if _get(cfg, key) != _get(defaults, key)
    ]


def _get(cfg: CfgNode, key: str):
    node = cfg
    for part in key.split("."):
        node = node[part]
    return node


def _check(cond: bool, key: str, value, why: str) -> None:
    if not cond:
        raise ValueError(f"{key} = {value!r}: {why}")


def validate_cfg(cfg: CfgNode) -> None:
    """Checks the values of a merged config.

    Args:
        cfg: the merged (not yet frozen) config.

    Raises:
        ValueError: one line naming the first bad key and value.
    """
    for key, choices in _CHOICES.items():
        value = _get(cfg, key)
        _check(value in choices, key, value, f"must be one of {list(choices)}")
    for key in _POSITIVE:
        value = _get(cfg, key)
        _check(value > 0, key, value, "must be positive")
    for key in ("NUM_GPUS", "SHARD_ID", "DATA_LOADER.NUM_WORKERS"):
        _check(_get(cfg, key) >= 0, key, _get(cfg, key), "must be >= 0")
    _check(
        cfg.SHARD_ID < cfg.NUM_SHARDS, "SHARD_ID", cfg.SHARD_ID, "must be < NUM_SHARDS"
    )

    scales = cfg.DATA.TRAIN_JITTER_SCALES
    _check(
        len(scales) == 2 and 0 < scales[0] <= scales[1],
        "DATA.TRAIN_JITTER_SCALES",
        scales,
        "must be [min, max] with 0 < min <= max",
    )
    for key in ("DATA.MEAN", "DATA.STD"):
        _check(len(_get(cfg, key)) == 3, key, _get(cfg, key), "needs 3 values")
    _check(min(cfg.DATA.STD) > 0, "DATA.STD", cfg.DATA.STD, "must be positive")
    nice = cfg.DATA_LOADER.WORKER_NICE
    _check(
        nice is None or (type(nice) is int and 0 <= nice <= 19),
        "DATA_LOADER.WORKER_NICE",
        nice,
        "must be None (by device) or an integer in [0, 19]",
    )
    frac = cfg.DATA.MAX_BAD_FRACTION
    _check(0 <= frac <= 1, "DATA.MAX_BAD_FRACTION", frac, "must be in [0, 1]")
    rate = cfg.MODEL.DROPOUT_RATE
    _check(0 <= rate < 1, "MODEL.DROPOUT_RATE", rate, "must be in [0, 1)")
    period = cfg.TRAIN.EVAL_PERIOD
    _check(period >= 0, "TRAIN.EVAL_PERIOD", period, "must be >= 0 (0: never)")
    minutes = cfg.TRAIN.CHECKPOINT_MINUTES
    _check(minutes >= 0, "TRAIN.CHECKPOINT_MINUTES", minutes, "must be >= 0 (0: off)")
    _check(
        not (cfg.TRAIN.CHECKPOINT_INFLATE and cfg.TRAIN.CHECKPOINT_TYPE == "caffe2"),
        "TRAIN.CHECKPOINT_INFLATE",
        True,
        "inflates .pyth weights only; convert the Caffe2 .pkl first "
        "(tools/convert_checkpoint.py) and set TRAIN.CHECKPOINT_TYPE pytorch",
    )
    loss = cfg.MODEL.LOSS_FUNC
    _check(
        not (cfg.TRAIN.ENABLE and loss == "bce"),
        "MODEL.LOSS_FUNC",
        loss,
        "takes probabilities, but the model gives logits in training (MODEL.HEAD_ACT "
        "applies in evaluation only); use bce_logit, the same loss on logits",
    )
    timeout = cfg.DIST_TIMEOUT_MINUTES
    _check(timeout > 0, "DIST_TIMEOUT_MINUTES", timeout, "must be positive")
    try:
        parse_signals(cfg.TRAIN.STOP_SIGNALS)
        known = True
    except ValueError:
        known = False
    _check(
        known,
        "TRAIN.STOP_SIGNALS",
        list(cfg.TRAIN.STOP_SIGNALS),
        "must name signals, e.g. [SIGUSR1, SIGUSR2, SIGTERM]",
    )

    _validate_gpu_only(cfg)
    _validate_solver(cfg.SOLVER)
    _validate_multigrid(cfg.MULTIGRID)


def _validate_gpu_only(cfg: CfgNode) -> None:
    """What needs a GPU: fp16 autocast, CUDA graphs."""
    dtype = cfg.TRAIN.MIXED_PRECISION_DTYPE
    _check(
        dtype != "fp16" or cfg.NUM_GPUS > 0 or not cfg.TRAIN.MIXED_PRECISION,
        "TRAIN.MIXED_PRECISION_DTYPE",
        dtype,
        "fp16 needs a GPU (NUM_GPUS > 0); set it auto or bf16 on CPU",
    )
    graphs = cfg.TRAIN.CUDA_GRAPHS
    _check(
        not graphs or cfg.NUM_GPUS > 0,
        "TRAIN.CUDA_GRAPHS",
        graphs,
        "needs a GPU (NUM_GPUS > 0); set it False on CPU",
    )


def _validate_solver(solver: CfgNode) -> None:
    steps = list(solver.STEPS)
    if solver.LR_POLICY in ("steps_with_relative_lrs", "steps") or steps:
        if solver.LR_POLICY != "steps":
            _check(
                len(steps) > 0 and steps[0] == 0,
                "SOLVER.STEPS",
                steps,
                "must start with 0 for a step LR policy",
            )
        _check(
            all(a < b for a, b in zip(steps, steps[1:])),
            "SOLVER.STEPS",
            steps,
            "must be strictly increasing",
        )
        _check(
            not steps or steps[-1] < solver.MAX_EPOCH,
            "SOLVER.STEPS",
            steps,
            f"every step must be below SOLVER.MAX_EPOCH ({solver.MAX_EPOCH})",
        )
    if solver.LR_POLICY == "steps_with_relative_lrs":
        _check(
            len(solver.LRS) >= len(steps),
            "SOLVER.LRS",
            list(solver.LRS),
            f"needs one value per SOLVER.STEPS entry ({len(steps)})",
        )
    _check(solver.BASE_LR > 0, "SOLVER.BASE_LR", solver.BASE_LR, "must be positive")
    _check(
        solver.WARMUP_EPOCHS >= 0,
        "SOLVER.WARMUP_EPOCHS",
        solver.WARMUP_EPOCHS,
        "must be >= 0",
    )


def _validate_multigrid(mg: CfgNode) -> None:
    _check(
        mg.EPOCH_FACTOR > 0, "MULTIGRID.EPOCH_FACTOR", mg.EPOCH_FACTOR, "must be > 0"
    )
    factors = mg.SHORT_CYCLE_FACTORS
    _check(
        len(factors) == 2 and all(0 < f <= 1 for f in factors),
        "MULTIGRID.SHORT_CYCLE_FACTORS",
        list(factors),
        "needs two spatial factors in (0, 1]",
    )
    _check(
        mg.SHORT_CYCLE_MIN_MAP >= 0,
        "MULTIGRID.SHORT_CYCLE_MIN_MAP",
        mg.SHORT_CYCLE_MIN_MAP,
        "must be >= 0 (0 turns the rule off)",
    )
    for pair in mg.LONG_CYCLE_FACTORS:
        _check(
            len(pair) == 2 and all(0 < f <= 1 for f in pair),
            "MULTIGRID.LONG_CYCLE_FACTORS",
            list(mg.LONG_CYCLE_FACTORS),
            "needs (temporal, spatial) pairs of factors in (0, 1]",
        )
