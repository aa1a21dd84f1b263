"""The memory format of the video models, decided in one place.

``build_model`` converts the model's weights and the models' forward converts
their inputs (``stem.prepare_pathways``) by :func:`uses_channels_last_3d`;
the trainer, tester and evaluator need not do anything (moving a model to a
device and loading a checkpoint keep its format).

The default is the contiguous format (MODEL.CHANNELS_LAST_3D False) on every
device; MODEL.CHANNELS_LAST_3D True selects ``torch.channels_last_3d``.
Measured on a 2-core CPU (PyTorch 2.13, oneDNN), training step (forward,
backward, SGD) of the tiny I3D demo model (configs/Demo/
Kinetics_I3D_tiny_multigrid.yaml) at its six multigrid shapes, formats timed
alternately in one process (``tools/benchmark_loader.py --model-only
--memory-format contiguous,channels_last_3d``): channels_last_3d ran at
0.68-0.76x the contiguous step with 2 threads on the idle machine, and with
another training job sharing the CPU at 0.68-0.74x with 1 thread and
0.69-0.75x with 2 (OMP_WAIT_POLICY=PASSIVE); with 1 thread 0.70-0.78x for
Kinetics_SLOWFAST_tiny and 0.61-0.68x for Kinetics_C2D_tiny. Inference at the
test view was within 10% either way. Contiguous
activations take the fused sub-batch BN path (``norm.SubBatchNorm3d``) and
the 2-frame convolution (``conv.TimeTrimmedConv3d``); before those existed,
channels_last_3d was ahead only at the 2-frame shape. On an H100 (PyTorch
2.11, fp16 autocast, full-width I3D R50 at 16 x 96 px and the five other
multigrid shapes of configs/Demo/SSv2_I3D_R50_study_gpu.yaml, model alone,
medians of 12 steps, one run): channels_last_3d took 33-42 ms per training
step against 47-56 ms contiguous with plain BN (1.2-1.45x faster), and 69-91
ms against 70-86 ms with sub-batch BN. The default stays contiguous on every
device (one measurement on one GPU); the GPU configs set the key.
"""

from fvcore.common.config import CfgNode


def uses_channels_last_3d(cfg: CfgNode) -> bool:
    """Whether the configured model runs in ``torch.channels_last_3d``.

    Args:
        cfg: the run's config (MODEL.CHANNELS_LAST_3D).

    Returns:
        bool: True for channels-last weights and inputs, False for the
        contiguous format.
    """
    return bool(cfg.MODEL.CHANNELS_LAST_3D)
