"""The memory format of the video models, decided in one place.

``build_model`` converts the model's weights and the models' forward converts
their inputs (``stem.prepare_pathways``) by :func:`uses_channels_last_3d`;
the trainer, tester and evaluator need not do anything (moving a model to a
device and loading a checkpoint keep its format).

MODEL.CHANNELS_LAST_3D True selects ``torch.channels_last_3d``, False the
contiguous format; the default, None, picks by device from the measurements
below: channels_last_3d on GPUs (NUM_GPUS > 0 and CUDA available), contiguous
on CPUs.

CPU. Measured on a 2-core CPU (PyTorch 2.13, oneDNN), training step (forward,
backward, SGD) of the tiny I3D demo model (configs/Demo/
Kinetics_I3D_tiny_multigrid.yaml) at its six multigrid shapes, formats timed
alternately in one process (``tools/benchmark_loader.py --model-only
--memory-format contiguous,channels_last_3d``): channels_last_3d ran at
0.68-0.76x the contiguous step with 2 threads on the idle machine, and with
another training job sharing the CPU at 0.68-0.74x with 1 thread and
0.69-0.75x with 2 (OMP_WAIT_POLICY=PASSIVE); with 1 thread 0.70-0.78x for
Kinetics_SLOWFAST_tiny and 0.61-0.68x for Kinetics_C2D_tiny (all with res5
stride 2). With the demo's res5 stride 1 (commit ce16b93; the same command,
two runs, medians of 10 steps, spreads 8-19%) channels_last_3d ran at
0.91-1.03x the contiguous step: no faster, so the default stays. Inference at
the test view was within 10% either way. Contiguous
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


def uses_channels_last_3d(cfg: CfgNode) -> bool:
    """Whether the configured model runs in ``torch.channels_last_3d``.

    Args:
        cfg: the run's config (MODEL.CHANNELS_LAST_3D, and NUM_GPUS when that
            key is None: a GPU run where CUDA is available).

    Returns:
        bool: True for channels-last weights and inputs, False for the
        contiguous format.
    """
    if cfg.MODEL.CHANNELS_LAST_3D is None:
        return cfg.NUM_GPUS > 0 and torch.cuda.is_available()
    return bool(cfg.MODEL.CHANNELS_LAST_3D)
