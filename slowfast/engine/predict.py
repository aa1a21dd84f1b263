"""Predicting the classes of video files with a trained model (``tools/predict.py``).

Each video is cut into the test views the tester scores
(``datasets/video_files.VideoFiles``: the Kinetics test split's decoding,
sampling, TEST.NUM_ENSEMBLE_VIEWS x TEST.NUM_SPATIAL_CROPS views), the model
scores every view in eval mode, where its head applies MODEL.HEAD_ACT
(softmax for single-label data, sigmoid for multi-label data such as
Charades), and the views combine by DATA.ENSEMBLE_METHOD as in the tester
(``evaluator.ensemble_views``). The tester ranks videos by the sum of their
views' scores; here "sum" is divided by the number of views, the mean, so
softmax scores of all classes add up to 1. "max" gives each class's highest
view score.
"""

import logging
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
from fvcore.common.config import CfgNode
from torch import nn
from torch.utils.data import DataLoader, Subset

from slowfast.checkpoint.files import CheckpointError
from slowfast.checkpoint.load import load_checkpoint
from slowfast.datasets.decoding.av_utils import DecodeError
from slowfast.datasets.lists import DataError
from slowfast.datasets.video_files import VideoFiles
from slowfast.engine import precision
from slowfast.engine.evaluator import ensemble_views, run_views
from slowfast.models import build_model
from slowfast.models.describe import ModelInfo
from slowfast.models.memory_format import choose_channels_last

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prediction:
    """The combined scores of one video's views.

    Attributes:
        video: the video, as given.
        views: how many views were scored.
        scores: [K] the class scores, on the CPU.
        activation: MODEL.HEAD_ACT ("softmax", "sigmoid" or "none").
        ensemble: how the views combined: "mean" or "max".
    """

    video: str
    views: int
    scores: torch.Tensor
    activation: str
    ensemble: str

    def top(self, k: int) -> List[Tuple[int, float]]:
        """The ``k`` best classes (fewer when the model has fewer), best first.

        Args:
            k: how many.

        Returns:
            list: (class id, score) pairs, scores descending.
        """
        values, ids = torch.topk(self.scores, min(k, self.scores.numel()))
        return list(zip(ids.tolist(), values.tolist()))


def prediction_device(cfg: CfgNode) -> torch.device:
    """The first GPU when NUM_GPUS > 0 and CUDA is present, else the CPU.

    Args:
        cfg: the config.

    Returns:
        torch.device: where the model runs.
    """
    if cfg.NUM_GPUS > 0:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        logger.info(
            "NUM_GPUS %d but no CUDA device: predicting on the CPU", cfg.NUM_GPUS
        )
    return torch.device("cpu")


def load_model(
    cfg: CfgNode, info: ModelInfo, path: str, device: torch.device
) -> nn.Module:
    """The config's model with the weights of checkpoint ``path``, on ``device``.

    Loaded as the tester loads it: strictly; with TEST.CHECKPOINT_TYPE
    caffe2 a file other than a ``.pyth`` is read as a Caffe2 ``.pkl`` (the
    runs' own checkpoints are ``.pyth`` files whatever it says).

    Args:
        cfg: the config the checkpoint was trained with.
        info: the model's description (``describe_model(cfg)``).
        path: the checkpoint.
        device: where the model runs.

    Returns:
        nn.Module: the model, in eval mode.

    Raises:
        CheckpointError: the file is missing or unreadable, or does not fit
            the config's model (one line naming it).
    """
    model = build_model(cfg, choose_channels_last(cfg, info)).to(device)
    caffe2 = cfg.TEST.CHECKPOINT_TYPE == "caffe2" and not path.endswith(".pyth")
    try:
        load_checkpoint(path, model, convert_from_caffe2=caffe2)
    except CheckpointError as err:
        if "does not match the model" not in str(err):
            raise
        raise CheckpointError(
            f"{err}; give the config (--cfg and overrides) the checkpoint was "
            "trained with"
        ) from err
    return model.eval()


def _batch_size(cfg: CfgNode, device: torch.device) -> int:
    """One test process's batch: TEST.BATCH_SIZE over the test's processes."""
    procs = cfg.NUM_GPUS if device.type == "cuda" else cfg.NUM_CPU_PROCS
    return max(1, cfg.TEST.BATCH_SIZE // max(1, procs))


def predict_videos(
    cfg: CfgNode,
    info: ModelInfo,
    model: nn.Module,
    paths: Sequence[str],
    device: torch.device,
) -> Iterator[Union[Prediction, DataError]]:
    """Scores each video's test views and combines them, one video at a time.

    Args:
        cfg: the config (views, sampling, DATA.ENSEMBLE_METHOD, HEAD_ACT).
        info: the model's description (how clips are packed for it).
        model: the model, on ``device``.
        paths: the videos (checked beforehand: ``video_files.check_videos``).
        device: where the model runs.

    Yields:
        Prediction: a video's scores, in the order of ``paths``; a video
        that fails to decode midway yields a ``DataError`` (one line naming
        it) instead, and the next videos are still scored.
    """
    if str(cfg.TEST.DATASET).lower() != "kinetics":
        logger.info(
            "TEST.DATASET %s: the video files are sampled as Kinetics' test "
            "videos are (DATA.NUM_FRAMES frames every DATA.SAMPLING_RATE at "
            "DATA.TARGET_FPS, TEST.NUM_ENSEMBLE_VIEWS clips), not by its frame "
            "lists' rule",
            cfg.TEST.DATASET,
        )
    dataset = VideoFiles(cfg, paths, model=info)
    autocast = precision.autocast_factory(cfg, device)
    batch = _batch_size(cfg, device)
    method = cfg.DATA.ENSEMBLE_METHOD
    for video_idx, path in enumerate(paths):
        views = Subset(dataset, dataset.views_of(video_idx))
        loader = DataLoader(views, batch_size=batch, shuffle=False)
        try:
            _, scores = run_views(model, loader, device, autocast)
        except RuntimeError as err:
            if not isinstance(err.__cause__, DecodeError):
                raise
            yield DataError(
                f"{err.__cause__}; check that the video plays, or re-encode or "
                "download it again"
            )
            continue
        owner = torch.zeros(len(scores), dtype=torch.long)
        combined, counts = ensemble_views(owner, scores, 1, method)
        if method == "sum":
            combined = combined / counts.view(-1, 1)
        yield Prediction(
            video=path,
            views=len(scores),
            scores=combined[0],
            activation=cfg.MODEL.HEAD_ACT,
            ensemble="mean" if method == "sum" else method,
        )


def prediction_record(
    prediction: Prediction, k: int, names: Optional[List[str]] = None
) -> Dict:
    """A video's result as a JSON-ready dict.

    Args:
        prediction: the video's scores.
        k: how many classes to list.
        names: class names by id (None: ``name`` is null).

    Returns:
        dict: ``video``, ``views``, ``activation``, ``ensemble`` and ``top``:
        [{``class``, ``name``, ``score``}] best first.
    """
    return {
        "video": prediction.video,
        "views": prediction.views,
        "activation": prediction.activation,
        "ensemble": prediction.ensemble,
        "top": [
            {
                "class": class_id,
                "name": names[class_id] if names else None,
                "score": round(score, 6),
            }
            for class_id, score in prediction.top(k)
        ],
    }


def format_prediction(
    prediction: Prediction, k: int, names: Optional[List[str]] = None
) -> str:
    """A video's result as text: a header line, then one line per class.

    Args:
        prediction: the video's scores.
        k: how many classes to list.
        names: class names by id (None: classes are shown by id).

    Returns:
        str: the lines, without a final newline.
    """
    act = "" if prediction.activation == "none" else f" {prediction.activation}"
    lines = [
        f"{prediction.video} ({prediction.ensemble}{act} of {prediction.views} "
        f"view{'s' if prediction.views != 1 else ''})"
    ]
    for class_id, score in prediction.top(k):
        label = f"{names[class_id]} ({class_id})" if names else f"class {class_id}"
        lines.append(f"  {score:.4f}  {label}")
    return "\n".join(lines)
