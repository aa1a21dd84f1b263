"""Architecture tables: stage depths, temporal kernels and pools per MODEL.ARCH.

Temporal kernel sizes follow PySlowFast: for every stage a short *basis* of
kernel sizes is repeated over the stage's blocks, the first
``RESNET.NUM_BLOCK_TEMP_KERNEL`` blocks keep it and the rest get 1 (e.g. I3D's
res4 basis ``[3, 1]`` with 6 blocks gives ``3, 1, 3, 1, 3, 1``).
"""

import dataclasses
from typing import Any, List, Sequence

from fvcore.common.config import CfgNode

# Number of residual blocks in res2..res5 for each RESNET.DEPTH.
STAGE_DEPTHS = {
    18: (2, 2, 2, 2),
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
}

# Per arch: for the stem and res2..res5, per pathway, the temporal kernel basis.
TEMPORAL_KERNEL_BASIS = {
    "c2d": [[[1]], [[1]], [[1]], [[1]], [[1]]],
    "i3d": [[[5]], [[3]], [[3, 1]], [[3, 1]], [[1, 3]]],
    "slow": [[[1]], [[1]], [[1]], [[3]], [[3]]],
    "slowfast": [
        [[1], [5]],
        [[1], [3]],
        [[1], [3]],
        [[3], [3]],
        [[3], [3]],
    ],
}

# Per arch and pathway, the [T, H, W] max-pool kernel (= stride) after res2.
POOL_AFTER_RES2 = {
    "c2d": [[2, 1, 1]],
    "i3d": [[2, 1, 1]],
    "slow": [[1, 1, 1]],
    "slowfast": [[1, 1, 1], [1, 1, 1]],
}

# Spatial stride of the stem: conv stride 2 times max-pool stride 2.
STEM_SPATIAL_STRIDE = 4


def stage_depths(depth: int) -> tuple:
    """Returns the number of blocks of res2..res5 for a network depth.

    Args:
        depth: RESNET.DEPTH (18, 50, 101 or 152).

    Returns:
        tuple: four block counts.

    Raises:
        ValueError: the depth has no table entry.
    """
    if depth not in STAGE_DEPTHS:
        raise ValueError(
            f"RESNET.DEPTH = {depth}: must be one of {sorted(STAGE_DEPTHS)}"
        )
    return STAGE_DEPTHS[depth]


def block_temporal_kernels(
    basis: Sequence[int], num_blocks: int, num_temp: int
) -> list:
    """Returns the temporal kernel size of each block of one stage and pathway.

    Args:
        basis: the arch's kernel basis for this stage and pathway.
        num_blocks: number of blocks in the stage.
        num_temp: RESNET.NUM_BLOCK_TEMP_KERNEL for this stage and pathway:
            how many leading blocks keep the basis kernel (clamped to the
            number of blocks).

    Returns:
        list[int]: one temporal kernel size per block.
    """
    num_temp = max(0, min(num_temp, num_blocks))
    repeated = list(basis) * num_blocks
    return repeated[:num_temp] + [1] * (num_blocks - num_temp)


def per_pathway(value: Sequence[Any], num_pathways: int, key: str) -> list:
    """Expands a per-pathway config entry to ``num_pathways`` values.

    A single entry is shared by all pathways (so a one-pathway default also
    serves SlowFast); otherwise entry ``p`` belongs to pathway ``p`` and extra
    entries are ignored, as the reference indexes them by pathway (its default
    NONLOCAL.POOL has two entries per stage, also for one-pathway models).

    Args:
        value: the config entry of one stage (a list with one item per pathway).
        num_pathways: the model's number of pathways.
        key: config key name, for the error message.

    Returns:
        list: ``num_pathways`` items.

    Raises:
        ValueError: the entry has fewer than ``num_pathways`` items and is not
            a single shared one.
    """
    value = list(value)
    if len(value) >= num_pathways:
        return value[:num_pathways]
    if len(value) == 1:
        return value * num_pathways
    raise ValueError(
        f"{key} = {value!r}: needs one entry per pathway ({num_pathways}) or one "
        "shared entry"
    )


def per_stage(value: Sequence[Any], num_pathways: int, key: str) -> list:
    """Expands a per-stage, per-pathway config value (4 stages res2..res5).

    Args:
        value: the config value (one item per stage).
        num_pathways: the model's number of pathways.
        key: config key name, for the error message.

    Returns:
        list[list]: 4 stages x ``num_pathways`` items.

    Raises:
        ValueError: the value does not describe 4 stages or the pathway counts
            do not fit.
    """
    value = list(value)
    if len(value) != 4:
        raise ValueError(f"{key} = {value!r}: needs 4 entries (res2..res5)")
    return [per_pathway(stage, num_pathways, key) for stage in value]


@dataclasses.dataclass(frozen=True)
class ArchSpec:
    """Everything about a network's structure that the config decides, per pathway.

    Attributes:
        stem_temp_kernels: temporal kernel of the stem conv, per pathway.
        block_temp_kernels: [stage][pathway] -> temporal kernel of each block.
        spatial_strides: [stage][pathway] -> stride of the stage's first block.
        spatial_dilations: [stage][pathway] -> dilation of the 3x3 convs.
        nonlocal_inds: [stage][pathway] -> blocks followed by a non-local block.
        nonlocal_groups: [stage][pathway] -> time groups of those blocks.
        nonlocal_pools: [stage][pathway] -> [T, H, W] pool of phi and g.
        pool_after_res2: [pathway] -> [T, H, W] max-pool between res2 and res3.
    """

    stem_temp_kernels: List[int]
    block_temp_kernels: List[List[List[int]]]
    spatial_strides: List[List[int]]
    spatial_dilations: List[List[int]]
    nonlocal_inds: List[List[List[int]]]
    nonlocal_groups: List[List[int]]
    nonlocal_pools: List[List[List[int]]]
    pool_after_res2: List[List[int]]


def arch_spec(cfg: CfgNode, num_pathways: int) -> ArchSpec:
    """Reads the per-stage, per-pathway structure of a ResNet or SlowFast.

    Args:
        cfg: the run's config (MODEL.ARCH, RESNET.*, NONLOCAL.*).
        num_pathways: 1 for ResNet, 2 for SlowFast.

    Returns:
        ArchSpec: the structure.

    Raises:
        ValueError: an unknown arch or depth, a per-stage value of the wrong
            length, or a non-local index past the end of its stage.
    """
    arch = cfg.MODEL.ARCH
    if arch not in TEMPORAL_KERNEL_BASIS:
        raise ValueError(
            f"MODEL.ARCH = {arch!r}: must be one of {sorted(TEMPORAL_KERNEL_BASIS)}"
        )
    basis = TEMPORAL_KERNEL_BASIS[arch]
    if len(basis[0]) != num_pathways:
        raise ValueError(
            f"MODEL.ARCH = {arch!r} has {len(basis[0])} pathway(s) but "
            f"MODEL.MODEL_NAME = {cfg.MODEL.MODEL_NAME!r} builds {num_pathways}"
        )
    depths = stage_depths(cfg.RESNET.DEPTH)
    num_temp = per_stage(
        cfg.RESNET.NUM_BLOCK_TEMP_KERNEL, num_pathways, "RESNET.NUM_BLOCK_TEMP_KERNEL"
    )
    nl_inds = per_stage(cfg.NONLOCAL.LOCATION, num_pathways, "NONLOCAL.LOCATION")
    for s, stage in enumerate(nl_inds):
        for p, inds in enumerate(stage):
            bad = [i for i in inds if not 0 <= i < depths[s]]
            if bad:
                raise ValueError(
                    f"NONLOCAL.LOCATION: res{s + 2} pathway {p} has block indices "
                    f"{bad} outside its {depths[s]} blocks"
                )
    return ArchSpec(
        stem_temp_kernels=[k[0] for k in basis[0]],
        block_temp_kernels=[
            [
                block_temporal_kernels(basis[s + 1][p], depths[s], num_temp[s][p])
                for p in range(num_pathways)
            ]
            for s in range(4)
        ],
        spatial_strides=per_stage(
            cfg.RESNET.SPATIAL_STRIDES, num_pathways, "RESNET.SPATIAL_STRIDES"
        ),
        spatial_dilations=per_stage(
            cfg.RESNET.SPATIAL_DILATIONS, num_pathways, "RESNET.SPATIAL_DILATIONS"
        ),
        nonlocal_inds=[[list(i) for i in stage] for stage in nl_inds],
        nonlocal_groups=per_stage(cfg.NONLOCAL.GROUP, num_pathways, "NONLOCAL.GROUP"),
        nonlocal_pools=[
            [list(pool) for pool in stage]
            for stage in per_stage(cfg.NONLOCAL.POOL, num_pathways, "NONLOCAL.POOL")
        ],
        pool_after_res2=POOL_AFTER_RES2[arch],
    )
