"""Tests of the Moving Digits generator (tools/make_demo_data.py, --size tiny)."""

import dataclasses
import hashlib
import json
import os
import subprocess
import sys

import av
import numpy as np
import pytest
import torch
from PIL import Image

from tests.helpers.tool_utils import REPO_ROOT, load_tool, tool_path
from workshop.dataprep.demo import MANIFEST, NUM_CLASSES, get_spec, make_demo_data
from workshop.dataprep.demo.digits import load_digit_bank
from workshop.dataprep.demo.render import place_sprite

TOOL = tool_path("make_demo_data.py")


def _load_tool():
    return load_tool("make_demo_data.py")


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory):
    """All three datasets at --size tiny, seed 0 (generated once per module)."""
    root = str(tmp_path_factory.mktemp("demo_tiny"))
    make_demo_data(root, "tiny", seed=0)
    return root


def _read_frame_list(path):
    with open(path) as handle:
        header = handle.readline().split()
        rows = [line.split() for line in handle if line.strip()]
    assert header == ["original_vido_id", "video_id", "frame_id", "path", "labels"]
    assert all(len(row) == 5 for row in rows)
    return rows


def _first_frame(path):
    with av.open(path) as container:
        frame = next(container.decode(video=0))
        return frame.to_ndarray(format="rgb24")


def _digest(paths):
    sha = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            sha.update(handle.read())
    return sha.hexdigest()


def test_digit_pools_are_disjoint_and_cover_every_class():
    bank = load_digit_bank()
    assert bank.images.shape == (1797, 8, 8)
    assert 0.0 <= bank.images.min() and bank.images.max() <= 1.0
    for digit in range(10):
        train = set(bank.pools["train"][digit].tolist())
        heldout = set(bank.pools["heldout"][digit].tolist())
        assert train and heldout and not train & heldout
        assert all(bank.labels[i] == digit for i in train | heldout)


def test_place_sprite_moves_and_turns_clockwise():
    sprite = torch.zeros(9, 9)
    sprite[4, 6:] = 1.0  # a bar pointing right from the centre
    centers = np.array([[20.0, 20.0], [40.0, 20.0], [20.0, 20.0]])
    angles = np.array([0.0, 0.0, np.pi / 2])
    alpha = place_sprite(sprite, centers, np.full(3, 9.0), angles, 40, 60)
    ys, xs = torch.nonzero(alpha[0] > 0.5, as_tuple=True)
    assert xs.float().mean() > 20 and abs(ys.float().mean() - 19.5) < 1
    ys1, xs1 = torch.nonzero(alpha[1] > 0.5, as_tuple=True)
    assert abs((xs1.float().mean() - xs.float().mean()) - 20) < 1e-3
    ys2, xs2 = torch.nonzero(alpha[2] > 0.5, as_tuple=True)
    # Clockwise on screen (y down): "pointing right" turns into "pointing down".
    assert ys2.float().mean() > 21 and abs(xs2.float().mean() - 19.5) < 1


def test_kinetics_format(tiny_root):
    folder = os.path.join(tiny_root, "kinetics")
    spec = get_spec("kinetics", "tiny")
    for split, count in spec.videos.items():
        with open(os.path.join(folder, f"{split}.csv")) as handle:
            rows = [line.split(" ") for line in handle.read().splitlines()]
        assert len(rows) == count
        labels = [int(label) for _, label in rows]
        assert set(labels) <= set(range(10)) and len(set(labels)) == min(10, count)
        for path, _ in rows:
            assert not os.path.isabs(path)
            assert os.path.isfile(os.path.join(folder, path))
    path = os.path.join(folder, rows[0][0])
    with av.open(path) as container:
        frames = list(container.decode(video=0))
    assert len(frames) == spec.num_frames
    assert frames[0].to_ndarray(format="rgb24").shape == (spec.height, spec.width, 3)
    assert sum(frame.key_frame for frame in frames) >= spec.num_frames // 16
    manifest = json.load(open(os.path.join(folder, MANIFEST)))
    assert manifest["complete"] and manifest["size"] == "tiny"


def test_ssv2_format(tiny_root):
    folder = os.path.join(tiny_root, "ssv2")
    spec = get_spec("ssv2", "tiny")
    label_map = json.load(
        open(os.path.join(folder, "something-something-v2-labels.json"))
    )
    assert sorted(int(v) for v in label_map.values()) == list(
        range(NUM_CLASSES["ssv2"])
    )
    for split, json_name in (("train", "train"), ("val", "validation")):
        entries = json.load(
            open(os.path.join(folder, f"something-something-v2-{json_name}.json"))
        )
        assert len(entries) == spec.videos[split]
        rows = _read_frame_list(os.path.join(folder, f"{split}.csv"))
        frames_per_video = {}
        for video_id, _, frame_id, path, _ in rows:
            frames_per_video.setdefault(video_id, []).append(int(frame_id))
            assert os.path.isfile(os.path.join(folder, path))
        for entry in entries:
            key = entry["template"].replace("[", "").replace("]", "")
            assert 0 <= int(label_map[key]) < NUM_CLASSES["ssv2"]
            assert frames_per_video[entry["id"]] == list(range(spec.num_frames))
    image = Image.open(os.path.join(folder, rows[0][3]))
    assert image.size == (spec.width, spec.height)


def test_charades_format(tiny_root):
    folder = os.path.join(tiny_root, "charades")
    spec = get_spec("charades", "tiny")
    for split in ("train", "val"):
        rows = _read_frame_list(os.path.join(folder, f"{split}.csv"))
        videos = {}
        for video_id, _, _, _, labels in rows:
            assert labels.startswith('"') and labels.endswith('"')
            parsed = [int(x) for x in labels.strip('"').split(",") if x]
            assert all(0 <= label < 10 for label in parsed)
            videos.setdefault(video_id, []).append(parsed)
        assert len(videos) == spec.videos[split]
        for per_frame in videos.values():
            assert len(per_frame) == spec.num_frames
            present = sorted({label for frame in per_frame for label in frame})
            assert 1 <= len(present) <= 3
            for label in present:  # each digit is visible over one contiguous span
                shown = [i for i, frame in enumerate(per_frame) if label in frame]
                assert shown == list(range(shown[0], shown[-1] + 1))
                assert len(shown) >= spec.num_frames // 4
        assert os.path.isfile(os.path.join(folder, rows[-1][3]))


@pytest.mark.slow
def test_same_seed_same_files_other_seed_differs(tiny_root, tmp_path):
    again = str(tmp_path / "again")
    other = str(tmp_path / "other")
    # Rendered in 2 processes: the files must not depend on the worker count.
    make_demo_data(again, "tiny", datasets=["kinetics", "charades", "ssv2"], workers=2)
    make_demo_data(other, "tiny", datasets=["kinetics"], seed=1)
    for name in ("train.csv", "val.csv", "test.csv"):
        a = open(os.path.join(tiny_root, "kinetics", name)).read()
        assert a == open(os.path.join(again, "kinetics", name)).read()
    video = "videos/train/3/train_00003.mp4"
    first = _first_frame(os.path.join(tiny_root, "kinetics", video))
    np.testing.assert_array_equal(
        first, _first_frame(os.path.join(again, "kinetics", video))
    )
    assert not np.array_equal(
        first, _first_frame(os.path.join(other, "kinetics", video))
    )
    names = ["train.csv", "frames/TR0001/TR0001-000010.jpg"]
    assert _digest([os.path.join(tiny_root, "charades", n) for n in names]) == _digest(
        [os.path.join(again, "charades", n) for n in names]
    )
    names = [
        "train.csv",
        "something-something-v2-validation.json",
        "frames/200003/200003_000005.jpg",
    ]
    assert _digest([os.path.join(tiny_root, "ssv2", n) for n in names]) == _digest(
        [os.path.join(again, "ssv2", n) for n in names]
    )


def test_refuses_foreign_folder_and_replaces_its_own(tmp_path, capsys):
    foreign = tmp_path / "kinetics"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("user data")
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        make_demo_data(str(tmp_path), "tiny", datasets=["kinetics"])
    argv = ["--out", str(tmp_path), "--size", "tiny", "--datasets", "kinetics"]
    assert _load_tool().main(argv) == 2  # one error line, no traceback
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {foreign}: not empty"), err
    assert (foreign / "keep.txt").read_text() == "user data"
    own = tmp_path / "ssv2"
    own.mkdir()
    (own / MANIFEST).write_text("{}")
    (own / "stale.txt").write_text("from an earlier run")
    make_demo_data(str(tmp_path), "tiny", datasets=["ssv2"])
    assert not (own / "stale.txt").exists() and (own / "train.csv").is_file()


@pytest.mark.slow
def test_cli_writes_one_summary_line_per_dataset(tmp_path):
    out = tmp_path / "cli"
    result = subprocess.run(
        [
            sys.executable,
            TOOL,
            "--out",
            str(out),
            "--size",
            "tiny",
            "--datasets",
            "ssv2",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    )
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ssv2") and "8 classes" in lines[0]
    with pytest.raises(SystemExit):
        _load_tool().parse_args(["--datasets", "youtube"])


def test_cli_keeps_the_former_option_name(capsys):
    """``--layouts``, the option's former name, still selects the datasets."""
    tool = _load_tool()
    assert tool.parse_args(["--layouts", "ssv2,kinetics"]).datasets == [
        "ssv2",
        "kinetics",
    ]
    assert tool.parse_args([]).datasets == ["kinetics", "ssv2", "charades"]
    with pytest.raises(SystemExit):
        tool.parse_args(["--help"])
    usage = capsys.readouterr().out
    assert "--datasets" in usage and "--layouts" not in usage  # hidden


@pytest.mark.parametrize(
    "config, name",
    [
        ("Kinetics_I3D_tiny.yaml", "kinetics"),
        ("SSv2_I3D_tiny.yaml", "ssv2"),
        ("Charades_I3D_tiny.yaml", "charades"),
    ],
)
def test_project_datasets_read_the_generated_data(tiny_root, config, name):
    from slowfast.config import load_config
    from slowfast.datasets import build_dataset

    folder = os.path.join(tiny_root, name)
    cfg = load_config(
        [os.path.join(REPO_ROOT, "configs", "Demo", config)],
        ["DATA.PATH_TO_DATA_DIR", folder, "DATA.PATH_PREFIX", folder],
    )
    spec = get_spec(name, "tiny")
    for split in ("train", "val"):
        dataset = build_dataset(cfg.TRAIN.DATASET, cfg, split)
        assert dataset.num_videos == spec.videos[split]
        frames, label, _, _ = dataset[0]
        assert tuple(frames[0].shape) == (3, 8, 64, 64)
        if name == "charades":
            assert label.shape == (10,) and 1 <= label.sum() <= 3
        else:
            assert label == 0  # classes cycle, so video 0 has class 0


def test_kinetics_study_size_is_the_demo_with_a_larger_test_split():
    """Videos are seeded by (seed, dataset, split, index): the study data's
    training and validation videos and its first 500 test videos are the
    README demo's files."""
    small, study = get_spec("kinetics", "small"), get_spec("kinetics", "study")
    assert study.videos == dict(small.videos, test=3000)
    assert dataclasses.replace(study, videos=small.videos) == small
