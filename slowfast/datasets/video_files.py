"""Video files named one by one, decoded into the test views (``tools/predict.py``).

``VideoFiles`` is the Kinetics test split over files given by path instead of
a list file: the same decoding (PyAV, or JPEG frame folders with
DATA.DECODING_BACKEND "frames"), temporal sampling (DATA.NUM_FRAMES frames
every DATA.SAMPLING_RATE at DATA.TARGET_FPS, the ``i``-th of
TEST.NUM_ENSEMBLE_VIEWS positions), spatial crops (TEST.NUM_SPATIAL_CROPS at
TEST_CROP_SIZE) and pathway packing, entry for entry (video-major, then
temporal view, then crop), whatever TEST.DATASET says (Charades and SSv2
test frame lists by their own temporal rules). The videos have no labels:
every label is 0.
"""

from typing import List, Optional, Sequence

from fvcore.common.config import CfgNode

from slowfast.datasets.decoding.av_utils import DecodeError, open_video
from slowfast.datasets.decoding.frames import frame_names
from slowfast.datasets.kinetics import Kinetics
from slowfast.datasets.lists import DataError
from slowfast.models.describe import ModelInfo


class VideoFiles(Kinetics):
    """The test views of video files (or frame folders) given by path.

    Not registered: it is built directly, never named by a config.

    Args:
        cfg: the run's config (its test views and sampling).
        paths: the video files, or frame folders with DATA.DECODING_BACKEND
            "frames".
        model: the model's description (None: described from ``cfg``).
    """

    name = "videos"

    def __init__(
        self, cfg: CfgNode, paths: Sequence[str], model: Optional[ModelInfo] = None
    ):
        self._given = [str(path) for path in paths]
        super().__init__(cfg, "test", model)

    def _load_annotations(self) -> int:
        # Kinetics' entries (its _load_annotations reads them from a list file).
        self.source = "given on the command line"
        self._paths = list(self._given)
        self._labels = [0] * len(self._given)
        return len(self._paths)

    def views_of(self, video_idx: int) -> List[int]:
        """The entries (views) of one video, in order.

        Args:
            video_idx: the video.

        Returns:
            list[int]: its NUM_ENSEMBLE_VIEWS x NUM_SPATIAL_CROPS entries.
        """
        per_video = self.num_temporal_views * self.num_spatial_crops
        return list(range(video_idx * per_video, (video_idx + 1) * per_video))


def video_problem(path: str, frame_folders: bool) -> Optional[str]:
    """Why a video cannot be read, in one line naming it, or None.

    Opens the container (its header, not the frames) or lists the frame
    folder: a quick check before any model is built.

    Args:
        path: the video file (or frame folder).
        frame_folders: DATA.DECODING_BACKEND is "frames".

    Returns:
        str: ``path: reason; what to do``, or None when it opens.
    """
    try:
        if frame_folders:
            frame_names(path)
        else:
            open_video(path).close()
    except DecodeError as err:
        if frame_folders:
            return (
                f"{err}; with DATA.DECODING_BACKEND frames give folders of JPEG "
                "frames, one per video"
            )
        return f"{err}; give a video file that FFmpeg can read (check the path)"
    return None


def check_videos(paths: Sequence[str], frame_folders: bool) -> None:
    """Raises one line naming the first video that cannot be read.

    Args:
        paths: the videos.
        frame_folders: DATA.DECODING_BACKEND is "frames".

    Raises:
        DataError: a video is missing or unreadable (the line says how many
            more are).
    """
    problems = [p for p in (video_problem(v, frame_folders) for v in paths) if p]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise DataError(problems[0] + more)
