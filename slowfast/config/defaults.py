"""The config tree: every key with its default and meaning.

Key names and defaults follow PySlowFast so its published YAML configs load
unmodified. ``get_cfg()`` returns a fresh, mutable copy of the defaults; the
loader (``slowfast.config.load_config``) merges files and overrides into it,
validates it and freezes it. Nothing changes a config after that.
"""

from fvcore.common.config import CfgNode

_C = CfgNode()

# ---------------------------------------------------------------------------- #
# Batch norm options
# ---------------------------------------------------------------------------- #
_C.BN = CfgNode()
# Recompute BN running statistics over NUM_BATCHES_PRECISE batches before eval.
_C.BN.USE_PRECISE_STATS = False
# Number of training batches used to compute precise BN statistics.
_C.BN.NUM_BATCHES_PRECISE = 200
# Weight decay applied to BN parameters (their own optimizer group).
_C.BN.WEIGHT_DECAY = 0.0
# Norm layer: "batchnorm", "sub_batchnorm" or "sync_batchnorm".
_C.BN.NORM_TYPE = "batchnorm"
# Number of splits of "sub_batchnorm" (statistics over batch / NUM_SPLITS clips).
_C.BN.NUM_SPLITS = 1
# Processes per group sharing statistics for "sync_batchnorm" (1: no sharing).
_C.BN.NUM_SYNC_DEVICES = 1
# Sub-batch BN on GPUs: "auto" runs the Triton kernels where they pass their
# check on the device at first use (else the native path, with a warning),
# "triton" runs them unchecked, "native" never.
_C.BN.SPLIT_KERNELS = "auto"

# ---------------------------------------------------------------------------- #
# Training options
# ---------------------------------------------------------------------------- #
_C.TRAIN = CfgNode()
# Run training.
_C.TRAIN.ENABLE = True
# Registered dataset name used for training: "kinetics", "ssv2" or "charades".
_C.TRAIN.DATASET = "kinetics"
# Training mini-batch size at the base shape, divided among the processes of
# one machine (as in the reference): NUM_SHARDS machines train with
# NUM_SHARDS x BATCH_SIZE clips per iteration.
_C.TRAIN.BATCH_SIZE = 64
# Validate every EVAL_PERIOD epochs and after the last; 0: never during training
# (test the final checkpoint instead; the multigrid study does). Both periods
# count baseline epochs of training: under multigrid, each time another
# period's worth of base-shape epochs of iterations is done
# (slowfast/multigrid/periods.py).
_C.TRAIN.EVAL_PERIOD = 10
# Save a checkpoint every CHECKPOINT_PERIOD epochs (as EVAL_PERIOD) and the last.
_C.TRAIN.CHECKPOINT_PERIOD = 10
# Resume from the newest valid checkpoint in OUTPUT_DIR/checkpoints.
_C.TRAIN.AUTO_RESUME = True
# Checkpoint to initialise from when no checkpoint is found in OUTPUT_DIR.
_C.TRAIN.CHECKPOINT_FILE_PATH = ""
# Checkpoint format: "pytorch" (.pyth) or "caffe2" (the reference's Caffe2 .pkl).
_C.TRAIN.CHECKPOINT_TYPE = "pytorch"
# Inflate a 2D (ImageNet) checkpoint into the 3D model's kernels.
_C.TRAIN.CHECKPOINT_INFLATE = False
# Start from epoch 0 when initialising from TRAIN.CHECKPOINT_FILE_PATH.
_C.TRAIN.CHECKPOINT_EPOCH_RESET = False
# Name pattern removed from checkpoint keys before loading (e.g. "module.").
_C.TRAIN.CHECKPOINT_CLEAR_NAME_PATTERN = ()
# Mixed precision: autocast to TRAIN.MIXED_PRECISION_DTYPE in training, validation
# and testing.
_C.TRAIN.MIXED_PRECISION = False
# "auto": bf16 where the device has bf16 kernels (CPUs, GPUs of compute
# capability 8.0 and newer), else fp16; "bf16"; "fp16" (GPU only). fp16 trains
# with a GradScaler, bf16 without (no scale to check on the host each step).
# Both arms of a comparison share it, as any key outside MULTIGRID.
_C.TRAIN.MIXED_PRECISION_DTYPE = "auto"
# Signals that stop training with a mid-epoch checkpoint at the next read-back
# of the step statistics (within LOG_PERIOD iterations; a scheduler's warning
# before preemption or the time limit).
_C.TRAIN.STOP_SIGNALS = ["SIGUSR1", "SIGUSR2", "SIGTERM"]
# Also save a mid-epoch checkpoint every CHECKPOINT_MINUTES minutes (0: off).
_C.TRAIN.CHECKPOINT_MINUTES = 0.0
# Replay each batch shape's forward and backward from a CUDA graph (GPU): the
# host launches one graph per step instead of every kernel. With several
# processes the gradients are averaged after the replay. Which GPU paths have
# run: docs/guide/mixed-precision.md, "The GPU paths: what has run on a GPU".
_C.TRAIN.CUDA_GRAPHS = False

# ---------------------------------------------------------------------------- #
# Testing options
# ---------------------------------------------------------------------------- #
_C.TEST = CfgNode()
# Run the multi-view test.
_C.TEST.ENABLE = True
# Registered dataset name used for testing.
_C.TEST.DATASET = "kinetics"
# Test mini-batch size (in views), divided among the processes of one machine.
_C.TEST.BATCH_SIZE = 8
# Checkpoint to test; empty means the last checkpoint in OUTPUT_DIR.
_C.TEST.CHECKPOINT_FILE_PATH = ""
# Number of temporal clips sampled per video at test.
_C.TEST.NUM_ENSEMBLE_VIEWS = 10
# Number of spatial crops per clip at test (1: centre, 3: both ends + centre).
_C.TEST.NUM_SPATIAL_CROPS = 3
# Checkpoint format for TEST.CHECKPOINT_FILE_PATH.
_C.TEST.CHECKPOINT_TYPE = "pytorch"
# File name (in OUTPUT_DIR) for per-video scores and labels; empty disables.
_C.TEST.SAVE_RESULTS_PATH = "test_results.pyth"
# Test again a checkpoint of this run already tested with the same settings
# (by default a rerun of a finished command prints the logged results).
_C.TEST.RERUN = False

# ---------------------------------------------------------------------------- #
# ResNet options
# ---------------------------------------------------------------------------- #
_C.RESNET = CfgNode()
# Residual block: "bottleneck_transform" or "basic_transform".
_C.RESNET.TRANS_FUNC = "bottleneck_transform"
# Number of groups of the 3x3 conv (1 for ResNet, >1 for ResNeXt).
_C.RESNET.NUM_GROUPS = 1
# Width of each group (64 for ResNet).
_C.RESNET.WIDTH_PER_GROUP = 64
# Use in-place ReLU.
_C.RESNET.INPLACE_RELU = True
# Put the stride on the 1x1 conv of the bottleneck (else on the 3x3).
_C.RESNET.STRIDE_1X1 = False
# Zero-initialise the last BN of each residual block.
_C.RESNET.ZERO_INIT_FINAL_BN = False
# Network depth: 18 (basic blocks), 50, 101 or 152 (bottleneck blocks).
_C.RESNET.DEPTH = 50
# Per stage and pathway, how many blocks get a temporal kernel > 1.
_C.RESNET.NUM_BLOCK_TEMP_KERNEL = [[3], [4], [6], [3]]
# Per stage and pathway, the spatial stride of the stage's first block.
_C.RESNET.SPATIAL_STRIDES = [[1], [2], [2], [2]]
# Per stage and pathway, the spatial dilation of the stage's convolutions.
_C.RESNET.SPATIAL_DILATIONS = [[1], [1], [1], [1]]

# ---------------------------------------------------------------------------- #
# Non-local options
# ---------------------------------------------------------------------------- #
_C.NONLOCAL = CfgNode()
# Per stage and pathway, indices of the blocks followed by a non-local block.
_C.NONLOCAL.LOCATION = [[[]], [[]], [[]], [[]]]
# Per stage and pathway, number of groups the non-local block splits time into.
_C.NONLOCAL.GROUP = [[1], [1], [1], [1]]
# Affinity normalisation: "dot_product" or "softmax".
_C.NONLOCAL.INSTANTIATION = "dot_product"
# Per stage and pathway, the max-pool kernel applied to phi and g.
_C.NONLOCAL.POOL = [
    [[1, 2, 2], [1, 2, 2]],
    [[1, 2, 2], [1, 2, 2]],
    [[1, 2, 2], [1, 2, 2]],
    [[1, 2, 2], [1, 2, 2]],
]

# ---------------------------------------------------------------------------- #
# Model options
# ---------------------------------------------------------------------------- #
_C.MODEL = CfgNode()
# Temporal kernel pattern: "c2d", "i3d", "slow" or "slowfast".
_C.MODEL.ARCH = "slowfast"
# Registered model class: "ResNet" or "SlowFast".
_C.MODEL.MODEL_NAME = "SlowFast"
# Number of classes to predict.
_C.MODEL.NUM_CLASSES = 400
# Loss: "cross_entropy" or "bce_logit" (multi-label).
_C.MODEL.LOSS_FUNC = "cross_entropy"
# Architectures with a single pathway.
_C.MODEL.SINGLE_PATHWAY_ARCH = ["c2d", "i3d", "slow"]
# Architectures with two pathways.
_C.MODEL.MULTI_PATHWAY_ARCH = ["slowfast"]
# Dropout rate before the classifier.
_C.MODEL.DROPOUT_RATE = 0.5
# Std of the normal init of the classifier weights.
_C.MODEL.FC_INIT_STD = 0.01
# Activation applied to the scores at eval: "softmax", "sigmoid" or "none".
_C.MODEL.HEAD_ACT = "softmax"
# Memory format of the model: True runs it in channels_last_3d, False in the
# contiguous format; None (the default) lets a run pick
# (slowfast/models/memory_format.py): channels_last_3d on GPUs (NUM_GPUS > 0,
# CUDA available); on CPUs channels_last_3d for models at least 16 channels
# wide, else contiguous (the 8-wide demo models); the BN and MULTIGRID keys do
# not change it, so a multigrid run and its baseline share the format.
# build_model alone reads None as contiguous.
_C.MODEL.CHANNELS_LAST_3D = None

# ---------------------------------------------------------------------------- #
# SlowFast options
# ---------------------------------------------------------------------------- #
_C.SLOWFAST = CfgNode()
# Channel ratio of the slow pathway to the fast pathway.
_C.SLOWFAST.BETA_INV = 8
# Frame-rate ratio of the fast pathway to the slow pathway.
_C.SLOWFAST.ALPHA = 8
# Output channels of the fast-to-slow fusion conv, relative to the fast width.
_C.SLOWFAST.FUSION_CONV_CHANNEL_RATIO = 2
# Temporal kernel of the fast-to-slow fusion conv.
_C.SLOWFAST.FUSION_KERNEL_SZ = 5
# Which T // ALPHA of the clip's T frames the slow pathway takes: "linspace"
# (PySlowFast: evenly spread from the first frame to the last) or "stride"
# (every ALPHA-th from the first: the frames at which the fusion conv, of
# temporal stride ALPHA, centres its outputs, at any clip length).
_C.SLOWFAST.SLOW_SAMPLING = "linspace"

# ---------------------------------------------------------------------------- #
# Data options
# ---------------------------------------------------------------------------- #
_C.DATA = CfgNode()
# Folder holding the dataset's list files (train.csv, val.csv, test.csv, ...).
_C.DATA.PATH_TO_DATA_DIR = ""
# Separator between path and label in Kinetics list files.
_C.DATA.PATH_LABEL_SEPARATOR = " "
# Prefix joined to relative video paths.
_C.DATA.PATH_PREFIX = ""
# Frames per clip (of the fast pathway for SlowFast).
_C.DATA.NUM_FRAMES = 8
# Temporal stride between sampled frames.
_C.DATA.SAMPLING_RATE = 8
# Per-channel mean subtracted from pixels in [0, 1].
_C.DATA.MEAN = [0.45, 0.45, 0.45]
# Number of input channels of each pathway.
_C.DATA.INPUT_CHANNEL_NUM = [3, 3]
# Per-channel std pixels are divided by.
_C.DATA.STD = [0.225, 0.225, 0.225]
# Range of the random short side used at training.
_C.DATA.TRAIN_JITTER_SCALES = [256, 320]
# Spatial size of training crops.
_C.DATA.TRAIN_CROP_SIZE = 224
# Spatial size of test crops (and of the resized short side at test).
_C.DATA.TEST_CROP_SIZE = 256
# Frame rate videos are resampled to before sampling clips.
_C.DATA.TARGET_FPS = 30
# Video decoding backend: "pyav" (videos) or "frames" (folders of JPEGs).
_C.DATA.DECODING_BACKEND = "pyav"
# Read coarse training grids (multigrid's smaller crops) from the lower-
# resolution renditions listed in PATH_TO_DATA_DIR/renditions.json, which
# tools/prepare_dataset.py writes (slowfast/datasets/renditions/files.py). Same
# field of view, fewer pixels to decode. No effect without that file.
_C.DATA.USE_RENDITIONS = True
# Draw the training short side as 1 / uniform(1 / max, 1 / min) of
# DATA.TRAIN_JITTER_SCALES instead of uniformly (any dataset).
_C.DATA.INV_UNIFORM_SAMPLE = False
# Random horizontal flip at training.
_C.DATA.RANDOM_FLIP = True
# Multi-label targets (multi-hot over NUM_CLASSES).
_C.DATA.MULTI_LABEL = False
# How test views of one video are combined: "sum" or "max".
_C.DATA.ENSEMBLE_METHOD = "sum"
# Reverse the channel order (RGB -> BGR).
_C.DATA.REVERSE_INPUT_CHANNEL = False
# Stop training when more than this fraction of an epoch's videos fail to load.
_C.DATA.MAX_BAD_FRACTION = 0.05

# ---------------------------------------------------------------------------- #
# Optimizer options
# ---------------------------------------------------------------------------- #
_C.SOLVER = CfgNode()
# Base learning rate.
_C.SOLVER.BASE_LR = 0.1
# Multiply BASE_LR, WARMUP_START_LR and COSINE_END_LR by NUM_SHARDS.
_C.SOLVER.BASE_LR_SCALE_NUM_SHARDS = False
# LR policy: "cosine", "steps_with_relative_lrs", "steps" or "constant".
_C.SOLVER.LR_POLICY = "cosine"
# Final learning rate of the cosine policy.
_C.SOLVER.COSINE_END_LR = 0.0
# LR decay factor of the "steps" policy.
_C.SOLVER.GAMMA = 0.1
# Epochs between decays of the "steps" policy.
_C.SOLVER.STEP_SIZE = 1
# Start epochs of the LR stages (first one is 0).
_C.SOLVER.STEPS = []
# LR of each stage relative to BASE_LR.
_C.SOLVER.LRS = []
# Number of training epochs.
_C.SOLVER.MAX_EPOCH = 300
# SGD momentum.
_C.SOLVER.MOMENTUM = 0.9
# SGD dampening.
_C.SOLVER.DAMPENING = 0.0
# Nesterov momentum.
_C.SOLVER.NESTEROV = True
# L2 weight decay of non-BN parameters.
_C.SOLVER.WEIGHT_DECAY = 1e-4
# Start LR of the warm-up relative to the LR at its end (reference key).
_C.SOLVER.WARMUP_FACTOR = 0.1
# Length of the linear warm-up in epochs.
_C.SOLVER.WARMUP_EPOCHS = 0.0
# LR at the start of the warm-up.
_C.SOLVER.WARMUP_START_LR = 0.01
# Optimizer: "sgd".
_C.SOLVER.OPTIMIZING_METHOD = "sgd"
# Clip gradients to this global L2 norm (None: no clipping).
_C.SOLVER.CLIP_GRAD_L2NORM = None

# ---------------------------------------------------------------------------- #
# Multigrid training options
# ---------------------------------------------------------------------------- #
_C.MULTIGRID = CfgNode()
# Total epochs = SOLVER.MAX_EPOCH * EPOCH_FACTOR under the long cycle.
_C.MULTIGRID.EPOCH_FACTOR = 1.5
# Enable the short cycle (spatial shape changes every iteration).
_C.MULTIGRID.SHORT_CYCLE = False
# Spatial factors of the short-cycle shapes (iterations i % 3 == 0 and 1).
_C.MULTIGRID.SHORT_CYCLE_FACTORS = [0.5, 0.5**0.5]
# Smallest width of the last feature map at the short cycle's smallest view,
# in that map's pixels before rounding (view / the model's total spatial
# stride): 3.5 is the paper's 112 px view at stride 32. Where a smaller crop or
# stride would leave less, both factors are raised (the smallest to this width,
# the other geometrically with it); a 224 px crop at stride 32 keeps the
# factors as given. 0 turns the rule off (the reference). See
# projects/multigrid/README.md, "Where we differ from PySlowFast".
_C.MULTIGRID.SHORT_CYCLE_MIN_MAP = 3.5
# Short-cycle crops: "absolute" (factors of TRAIN_CROP_SIZE, the reference's
# behaviour) or "relative" (factors of the current long-cycle crop, the paper).
_C.MULTIGRID.SHORT_CYCLE_CROP_MODE = "absolute"
# Enable the long cycle (base shape changes within each LR stage).
_C.MULTIGRID.LONG_CYCLE = False
# (temporal, spatial) factors of the long-cycle base shapes.
_C.MULTIGRID.LONG_CYCLE_FACTORS = [
    (0.25, 0.5**0.5),
    (0.5, 0.5**0.5),
    (0.5, 1),
    (1, 1),
]
# Clips per BN group at the long-cycle shape.
_C.MULTIGRID.BN_BASE_SIZE = 8
# Reference key, not read: TRAIN.EVAL_PERIOD / CHECKPOINT_PERIOD count baseline
# epochs of training under multigrid too.
_C.MULTIGRID.EVAL_FREQ = 3
# Sampling rate at the long-cycle shapes (0: derived from the span, as the paper).
_C.MULTIGRID.LONG_CYCLE_SAMPLING_RATE = 0
# Short-side jitter of crops smaller than TRAIN_CROP_SIZE: "resample" scales
# both ends of DATA.TRAIN_JITTER_SCALES by crop / TRAIN_CROP_SIZE (the same
# fields of view at a lower resolution, the paper's sampling grid);
# "lower_bound" scales only the lower end (the reference implementation: small
# crops also zoom in, down to crop / max of the short side).
_C.MULTIGRID.JITTER_SCALE_MODE = "resample"
# Reference keys kept for config compatibility (the schedule derives them).
_C.MULTIGRID.DEFAULT_B = 0
_C.MULTIGRID.DEFAULT_T = 0
_C.MULTIGRID.DEFAULT_S = 0

# ---------------------------------------------------------------------------- #
# Data loader options
# ---------------------------------------------------------------------------- #
_C.DATA_LOADER = CfgNode()
# Loader worker processes per training process.
_C.DATA_LOADER.NUM_WORKERS = 8
# Pin host memory of batches (GPU only).
_C.DATA_LOADER.PIN_MEMORY = True
# Let PyAV use several decoder threads per video.
_C.DATA_LOADER.ENABLE_MULTI_THREAD_DECODE = False
# Decoder threads per video when multi-thread decode is enabled (0: auto).
_C.DATA_LOADER.DECODE_THREADS = 0
# Cache decoded frames in memory (small datasets only; per worker).
_C.DATA_LOADER.FRAME_CACHE = False
# Size bound of each worker's decoded-frame cache, in MB (LRU eviction).
_C.DATA_LOADER.FRAME_CACHE_MB = 512
# Niceness added to each loader worker process (os.nice, 0-19): a higher value
# lets the training process's threads win the CPU cores they share with the
# workers. None: 19 in CPU runs (NUM_GPUS 0), 0 in GPU runs (see
# slowfast/config/derived.py, worker_niceness).
_C.DATA_LOADER.WORKER_NICE = None

# ---------------------------------------------------------------------------- #
# TensorBoard options
# ---------------------------------------------------------------------------- #
_C.TENSORBOARD = CfgNode()
# Write TensorBoard summaries.
_C.TENSORBOARD.ENABLE = False
# Log folder; empty means OUTPUT_DIR/runs-<dataset>.
_C.TENSORBOARD.LOG_DIR = ""

# ---------------------------------------------------------------------------- #
# Misc options
# ---------------------------------------------------------------------------- #
# Accelerators per machine (0: CPU). One process per GPU.
_C.NUM_GPUS = 1
# CPU processes per machine when NUM_GPUS is 0 (DDP over gloo).
_C.NUM_CPU_PROCS = 1
# Number of machines.
_C.NUM_SHARDS = 1
# Index of this machine.
_C.SHARD_ID = 0
# Folder for checkpoints, logs and results.
_C.OUTPUT_DIR = "./tmp"
# Seed of every random number generator.
_C.RNG_SEED = 1
# Log training statistics every LOG_PERIOD iterations.
_C.LOG_PERIOD = 10
# Log the model's parameter count and FLOPs at start.
_C.LOG_MODEL_INFO = True
# torch.distributed backend on GPU ("nccl"); CPU always uses "gloo".
_C.DIST_BACKEND = "nccl"
# A collective that waits longer than this (a process died or hangs) fails
# the run instead of hanging it.
_C.DIST_TIMEOUT_MINUTES = 30.0
# Modules of the user's own code (registered models, datasets, losses, ...) that
# every process imports before the config's names are checked and the model and
# datasets are built: dotted module names, importable from PYTHONPATH or the
# current directory. --import MODULE (tools/run_net.py, tools/submit.py) adds to
# it. Not a reference key (docs/EXTENDING.md).
_C.IMPORTS = []


def get_cfg() -> CfgNode:
    """Returns a fresh, mutable copy of the default config.

    Returns:
        CfgNode: the defaults; callers merge into it and then freeze it.
    """
    return _C.clone()
