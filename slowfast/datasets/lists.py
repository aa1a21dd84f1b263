"""Readers of the datasets' list and label files.

Each reader returns what it parsed plus a list of ``ListProblem`` (one per bad
line or entry). With ``strict=True`` it raises ``ValueError`` at the first
problem instead, with the file, the line number and the line; the datasets
read strictly, the verifier leniently (to report every problem).
"""

import json
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from slowfast.utils.errors import UserError

FRAME_LIST_HEADER = "original_vido_id video_id frame_id path labels"


@dataclass(frozen=True)
class ListProblem:
    """A bad line or entry of a list file.

    Attributes:
        file: the list or label file.
        line: 1-based line number (0 when the problem is not one line).
        text: the offending line or entry.
        reason: what is wrong.
    """

    file: str
    line: int
    text: str
    reason: str

    @property
    def where(self) -> str:
        """``file:line``, or the file when the problem is not one line."""
        return f"{self.file}:{self.line}" if self.line else self.file

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}: {self.text!r}"


@dataclass
class FrameVideo:
    """One video of a frame list: its frames (in file order) and their labels."""

    name: str
    paths: List[str] = field(default_factory=list)
    labels: List[List[int]] = field(default_factory=list)
    line: int = 0


@dataclass(frozen=True)
class VideoToCheck:
    """One video the verifier decodes: a file or folder (``frames`` empty) or
    the frames of a frame list.

    Attributes:
        path: the file, folder, or where the frame list names the video.
        min_frames: the clip span in frames at ``target_fps``.
        frames: the frame files of a frame list.
        backend: DATA.DECODING_BACKEND for a file or folder.
        target_fps: DATA.TARGET_FPS (a video file's span scales with its fps).
    """

    path: str
    min_frames: float
    frames: Tuple[str, ...] = ()
    backend: str = "pyav"
    target_fps: float = 30.0


@dataclass
class SplitLists:
    """A split's lists as ``tools/verify_dataset.py`` checks them.

    Attributes:
        source: the list file the split is named by.
        entries: how many entries the lists hold, bad ones included.
        problems: ``(where, why)`` of each bad line or entry.
        videos: the videos to decode.
    """

    source: str
    entries: int = 0
    problems: List[Tuple[str, str]] = field(default_factory=list)
    videos: List[VideoToCheck] = field(default_factory=list)

    def add_list_problems(self, problems: Sequence[ListProblem]) -> None:
        """Adds a reader's problems, each at its file and line."""
        self.problems += [(p.where, f"{p.reason}: {p.text!r}") for p in problems]


class DataError(UserError, ValueError):
    """A problem in the user's data or list files (one line naming the file,
    and the line or entry); launchers report it without a traceback."""


def _fail(problem: ListProblem, strict: bool, problems: List[ListProblem]) -> None:
    if strict:
        raise DataError(str(problem))
    problems.append(problem)


def label_problem(label: int, num_classes: int) -> Optional[str]:
    """Why a class id is invalid for MODEL.NUM_CLASSES classes, or None.

    The datasets raise it (with the file and line) and the verifier reports it.
    """
    if 0 <= label < num_classes:
        return None
    return (
        f"label {label} outside 0..{num_classes - 1} (MODEL.NUM_CLASSES={num_classes})"
    )


def join_prefix(prefix: str, path: str) -> str:
    """Joins a relative path to DATA.PATH_PREFIX (absolute paths are kept)."""
    return os.path.join(prefix, path) if prefix else path


def _require_file(path: str) -> None:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: list file not found")


def read_kinetics_list(
    path: str, prefix: str = "", sep: str = " ", strict: bool = True
) -> Tuple[List[Tuple[str, int, int]], List[ListProblem]]:
    """Reads a Kinetics list: one ``path<sep>label`` per line.

    Args:
        path: the list file (train.csv, val.csv or test.csv).
        prefix: DATA.PATH_PREFIX, joined to relative video paths.
        sep: DATA.PATH_LABEL_SEPARATOR.
        strict: raise at the first bad line instead of collecting it.

    Returns:
        (entries, problems): entries are (video path, label, line number).

    Raises:
        FileNotFoundError: the list file does not exist.
        ValueError: (strict) a malformed line, naming file, line number, line.
    """
    _require_file(path)
    entries: List[Tuple[str, int, int]] = []
    problems: List[ListProblem] = []
    with open(path, "r") as f:
        for line_no, raw in enumerate(f, start=1):
            line = raw.strip()
            if not line:
                continue
            parts = line.split() if sep.isspace() else line.split(sep)
            if len(parts) != 2 or not parts[0].strip():
                problem = ListProblem(path, line_no, line, f"expected 'path{sep}label'")
                _fail(problem, strict, problems)
                continue
            video, label = parts[0].strip(), parts[1].strip()
            try:
                value = int(label)
            except ValueError:
                problem = ListProblem(path, line_no, line, "label is not an integer")
                _fail(problem, strict, problems)
                continue
            entries.append((join_prefix(prefix, video), value, line_no))
    return entries, problems


def _parse_labels(field_text: str) -> List[int]:
    text = field_text.replace('"', "").strip()
    return [int(x) for x in text.split(",") if x.strip() != ""] if text else []


def read_frame_list(
    path: str, prefix: str = "", strict: bool = True
) -> Tuple["OrderedDict[str, FrameVideo]", List[ListProblem]]:
    """Reads a frame list (SSv2 / Charades format of the reference).

    The file starts with the header ``original_vido_id video_id frame_id path
    labels``; each further line is one frame, space separated; ``labels`` is a
    comma-separated list of class ids (possibly empty or ``""``).

    Args:
        path: the frame list (train.csv or val.csv).
        prefix: DATA.PATH_PREFIX, joined to the frame paths.
        strict: raise at the first bad line instead of collecting it.

    Returns:
        (videos, problems): videos by name, in file order.

    Raises:
        FileNotFoundError: the list file does not exist.
        ValueError: (strict) a bad header or line, naming file and line.
    """
    _require_file(path)
    videos: "OrderedDict[str, FrameVideo]" = OrderedDict()
    problems: List[ListProblem] = []
    with open(path, "r") as f:
        header = f.readline().strip()
        if not header.startswith("original_vido_id"):
            problem = ListProblem(
                path, 1, header, f"expected header {FRAME_LIST_HEADER!r}"
            )
            _fail(problem, strict, problems)
            return videos, problems
        for line_no, raw in enumerate(f, start=2):
            line = raw.strip()
            if not line:
                continue
            row = line.split()
            if len(row) not in (4, 5):
                reason = (
                    "expected 5 fields 'original_vido_id video_id frame_id path labels'"
                )
                _fail(ListProblem(path, line_no, line, reason), strict, problems)
                continue
            try:
                labels = _parse_labels(row[4]) if len(row) == 5 else []
            except ValueError:
                reason = "labels must be comma-separated integers"
                _fail(ListProblem(path, line_no, line, reason), strict, problems)
                continue
            video = videos.get(row[0])
            if video is None:
                video = videos[row[0]] = FrameVideo(name=row[0], line=line_no)
            video.paths.append(join_prefix(prefix, row[3]))
            video.labels.append(labels)
    return videos, problems


def _load_json(path: str):
    _require_file(path)
    with open(path, "r") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}: not valid JSON ({err})") from err


def read_ssv2_labels(
    data_dir: str, split: str, strict: bool = True
) -> Tuple[List[Tuple[str, int]], List[ListProblem]]:
    """Reads SSv2 video ids and class ids from the public release's JSON files.

    ``something-something-v2-labels.json`` maps each template to a class id
    (a string of digits); ``something-something-v2-{train,validation}.json``
    lists the videos with their template, whose ``[something]`` placeholders
    lose their brackets before the lookup (as the reference does).

    Args:
        data_dir: DATA.PATH_TO_DATA_DIR.
        split: "train" (train file) or "val"/"test" (validation file).
        strict: raise at the first problem instead of collecting it.

    Returns:
        (entries, problems): entries are (video id, class id) in file order.

    Raises:
        FileNotFoundError: a JSON file does not exist.
        ValueError: invalid JSON, or (strict) an unknown template.
    """
    labels_path = os.path.join(data_dir, "something-something-v2-labels.json")
    name = "train" if split == "train" else "validation"
    videos_path = os.path.join(data_dir, f"something-something-v2-{name}.json")
    label_dict: Dict[str, str] = _load_json(labels_path)
    videos = _load_json(videos_path)
    if not isinstance(label_dict, dict) or not isinstance(videos, list):
        raise DataError(
            f"{labels_path} must hold a template->id mapping and {videos_path} a list"
        )
    entries: List[Tuple[str, int]] = []
    problems: List[ListProblem] = []
    for number, video in enumerate(videos, start=1):
        vid: Optional[str] = None
        try:
            vid = str(video["id"])
            template = video["template"].replace("[", "").replace("]", "")
        except (KeyError, TypeError, AttributeError):
            reason = f"entry {number} lacks 'id' or 'template'"
            _fail(
                ListProblem(videos_path, 0, str(video)[:80], reason), strict, problems
            )
            continue
        if template not in label_dict:
            reason = f"video {vid}: template not in {os.path.basename(labels_path)}"
            _fail(ListProblem(videos_path, 0, template, reason), strict, problems)
            continue
        try:
            entries.append((vid, int(label_dict[template])))
        except ValueError:
            reason = f"class id of template is not an integer: {label_dict[template]!r}"
            _fail(ListProblem(labels_path, 0, template, reason), strict, problems)
    return entries, problems
