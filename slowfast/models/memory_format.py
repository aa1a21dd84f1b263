"""The memory format of the video models, decided in one place.

``build_model`` converts the model's weights and the models' forward converts
their inputs (``stem.prepare_pathways``) by :func:`uses_channels_last_3d`;
the trainer, tester and evaluator need not do anything (moving a model to a
device and loading a checkpoint keep its format).

MODEL.CHANNELS_LAST_3D True selects ``torch.channels_last_3d``, False the
contiguous format; the default, None, picks from the measurements below:
channels_last_3d on GPUs (NUM_GPUS > 0 and CUDA available); on CPUs
channels_last_3d for models at least 16 channels wide
(RESNET.WIDTH_PER_GROUP x NUM_GROUPS) whose training BN is one group per
process at the base shape, contiguous otherwise (the tiny demo models, and
sub-batch BN with splits at the base shape, which only the contiguous format
runs as one fused batch norm).

CPU, full-width models (2-core AMD EPYC, PyTorch 2.13, 2 threads, batch 2,
``tools/benchmark_reference.py``: the reference implementation's model and
ours built from the same Kinetics configs, stepping in turns, medians of 5
rounds; DATASET.md has the table): at 8 x 224 px, our training step in
channels_last_3d took 2.26 s (I3D R50), 2.94 s (I3D NLN R50) and 4.36 s
(SlowFast 8x8 R50) against the reference's 2.78, 3.37 and 5.13 s
(1.15-1.23x faster), and inference at 8 x 256 px 0.92, 1.23 and 1.50 s
against 1.16, 1.54 and 1.87 s (1.25-1.26x); contiguous, ours was at parity
(0.99-1.09x).
``tools/benchmark_loader.py --model-only --memory-format
contiguous,channels_last_3d`` on the multigrid shapes: I3D R50 at batch 2
(configs/Kinetics/I3D_8x8_R50_multigrid.yaml, one BN group at every shape
but the 8x one) 1.11-1.19x faster in channels_last_3d at five shapes and
even at the 8x shape; a bottleneck ResNet-50 at the demo's 64 px and batch 16
with one BN group per batch (``--bn plain``) 1.14-1.24x at width 64 and
1.20-1.30x at width 16; with the demo's 2-16 sub-batch BN splits the
contiguous format won at every width (8 to 64).

CPU, the tiny demo models (8 channels wide). Measured on a 2-core CPU
(PyTorch 2.13, oneDNN), training step (forward, backward, SGD) of the tiny
I3D demo model (configs/Demo/
Kinetics_I3D_tiny_multigrid.yaml) at its six multigrid shapes, formats timed
alternately in one process (``tools/benchmark_loader.py --model-only
--memory-format contiguous,channels_last_3d``): channels_last_3d ran at
0.68-0.76x the contiguous step with 2 threads on the idle machine, and with
another training job sharing the CPU at 0.68-0.74x with 1 thread and
0.69-0.75x with 2 (OMP_WAIT_POLICY=PASSIVE); with 1 thread 0.70-0.78x for
Kinetics_SLOWFAST_tiny and 0.61-0.68x for Kinetics_C2D_tiny (all with res5
stride 2). With the demo's res5 stride 1 (commit ce16b93; the same command,
two runs, medians of 10 steps, spreads 8-19%) channels_last_3d ran at
0.91-1.03x the contiguous step, and 0.92-1.10x with one BN group per batch
(``--bn plain``, as the demo baseline trains): no faster, so these models stay
contiguous. Inference at the test view was within 10% either way. Contiguous
activations take the fused sub-batch BN path (``norm.SubBatchNorm3d``) and
the 2-frame convolution (``conv.TimeTrimmedConv3d``); before those existed,
channels_last_3d was ahead only at the 2-frame shape.

GPU. On an H100 (PyTorch 2.11, fp16 autocast, full-width I3D R50 at 16 x 96
px and the five other multigrid shapes of configs/Demo/
SSv2_I3D_R50_study_gpu.yaml, model alone): channels_last_3d took 33-42 ms per
training step against 47-56 ms contiguous with plain BN (1.2-1.45x faster;
medians of 12 steps, one run), and in a second run (``--bn sub,plain``, medians
of 10 steps) 36-42 ms against 45-50 ms with plain BN and 72-103 ms against
76-85 ms with sub-batch BN (about even). Not measured on other GPUs.
"""

import torch
from fvcore.common.config import CfgNode

from slowfast.multigrid.shapes import bn_layout
from slowfast.utils.distributed import procs_per_machine

# Narrower models run as fast or faster contiguous on CPUs (measured above).
CPU_MIN_WIDTH = 16


def uses_channels_last_3d(cfg: CfgNode) -> bool:
    """Whether the configured model runs in ``torch.channels_last_3d``.

    Args:
        cfg: the run's config (MODEL.CHANNELS_LAST_3D; when that key is None:
            NUM_GPUS, the model's width and the BN grouping of training at the
            base shape).

    Returns:
        bool: True for channels-last weights and inputs, False for the
        contiguous format.
    """
    if cfg.MODEL.CHANNELS_LAST_3D is not None:
        return bool(cfg.MODEL.CHANNELS_LAST_3D)
    if cfg.NUM_GPUS > 0:
        return torch.cuda.is_available()
    width = cfg.RESNET.WIDTH_PER_GROUP * cfg.RESNET.NUM_GROUPS
    return width >= CPU_MIN_WIDTH and base_bn_splits(cfg) == 1


def base_bn_splits(cfg: CfgNode) -> int:
    """BN groups per training process at the base shape.

    Multigrid groups MULTIGRID.BN_BASE_SIZE clips (the process's share of
    TRAIN.BATCH_SIZE divided by it, at least 1); otherwise BN.NUM_SPLITS for
    ``sub_batchnorm`` and 1 for the other norms.
    """
    if cfg.MULTIGRID.LONG_CYCLE or cfg.MULTIGRID.SHORT_CYCLE:
        procs = procs_per_machine(cfg)
        per_proc = cfg.TRAIN.BATCH_SIZE // procs
        return bn_layout(per_proc, procs, cfg.MULTIGRID.BN_BASE_SIZE)[0]
    if cfg.BN.NORM_TYPE == "sub_batchnorm":
        return cfg.BN.NUM_SPLITS
    return 1
