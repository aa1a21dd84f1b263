"""Tests of the Kinetics, SSv2 and Charades datasets on tiny generated data."""

import logging
import os
import pickle
import time

import pytest
import torch

from slowfast.datasets import (
    BadDataMonitor,
    EvalShardSampler,
    SamplingGrid,
    build_dataset,
    dataset_size,
)
from slowfast.datasets.lists import DataError
from tests.helpers.video_utils import (
    frame_index,
    make_charades,
    make_kinetics,
    make_ssv2,
    tiny_cfg,
    write_kinetics_list,
    write_video,
)

KEYS = {"video_idx", "temporal_idx", "spatial_idx", "num_failed"}


def source_indices(clip: torch.Tensor):
    """Source frame of each time step of a uint8 [C, T, H, W] clip."""
    grey = clip.float()
    return [frame_index(v) for v in grey.mean(dim=(0, 2, 3))]


@pytest.fixture(scope="module")
def kinetics_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("kinetics"))
    make_kinetics(root, [("v0.mp4", 40, 0), ("v2.mp4", 30, 2), ("v3.mp4", 12, 0)])
    # An odd-sized video with an audio stream, second in the list.
    write_video(os.path.join(root, "v1.mp4"), 50, 67, 45, audio=True)
    rows = [("v0.mp4", 0), ("v1.mp4", 1), ("v2.mp4", 2), ("v3.mp4", 0)]
    for split in ("train", "val", "test"):
        write_kinetics_list(os.path.join(root, f"{split}.csv"), rows)
    return root


@pytest.fixture(scope="module")
def ssv2_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("ssv2"))
    return make_ssv2(root, {"101": 10, "102": 12, "103": 8, "104": 9})


def _charades_labels(video, frame):
    if video == "c0":
        return "0" if frame < 10 else "1"
    if video == "c1":
        return '""' if frame % 2 else "2"
    return "0,2" if frame == 3 else '""'


@pytest.fixture(scope="module")
def charades_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("charades"))
    return make_charades(root, {"c0": 20, "c1": 9, "c2": 6}, _charades_labels)


def test_kinetics_train_item_and_grids(kinetics_root):
    cfg = tiny_cfg(kinetics_root)
    ds = build_dataset("kinetics", cfg, "train")
    assert len(ds) == ds.num_videos == 4
    frames, label, index, extras = ds[1]
    assert len(frames) == 1 and frames[0].shape == (3, 4, 16, 16)
    assert frames[0].dtype == torch.uint8  # the model normalises it
    assert (label, index) == (1, 1)
    assert set(extras) == KEYS and extras["num_failed"] == 0
    assert (extras["temporal_idx"], extras["spatial_idx"]) == (-1, -1)
    for t, s in ((8, 12), (2, 16), (4, 20)):
        grid = SamplingGrid.from_shape(cfg, t, s)
        clip = ds[(0, grid, 123)][0][0]
        assert clip.shape == (3, t, s, s)
        assert torch.equal(clip, ds[(0, grid, 123)][0][0])  # seeded: reproducible


def test_kinetics_stride_range_changes_span(kinetics_root):
    cfg = tiny_cfg(kinetics_root)
    ds = build_dataset("kinetics", cfg, "train")
    widths = set()
    for seed in range(40):
        idx = source_indices(ds[(0, SamplingGrid(4, 16, 1, 6, 24, 32), seed)][0][0])
        widths.add(idx[-1] - idx[0])
    # Span = 4 * rate - 1 frames: rates 1..6 give widths 3..23.
    assert min(widths) <= 7 and max(widths) >= 19
    fixed = set()
    for seed in range(10):
        idx = source_indices(ds[(0, None, seed)][0][0])
        fixed.add(idx[-1] - idx[0])
    assert fixed == {7}  # config stride 2: linspace over 8 source frames


def test_kinetics_val_and_test_views(kinetics_root):
    cfg = tiny_cfg(kinetics_root)
    val = build_dataset("kinetics", cfg, "val")
    assert len(val) == 4
    frames, label, index, extras = val[0]
    assert frames[0].shape == (3, 4, 20, 20)
    assert (extras["temporal_idx"], extras["spatial_idx"]) == (0, 1)
    assert source_indices(frames[0]) == [16, 18, 20, 23]  # centre clip of 40
    test = build_dataset("kinetics", cfg, "test")
    assert len(test) == 4 * 2 * 3 and test.num_videos == 4
    assert test.video_labels() == [0, 1, 2, 0]
    for i in range(len(test)):
        video, temporal, spatial = test.view(i)
        assert (video, temporal, spatial) == (i // 6, (i % 6) // 3, i % 3)
    frames, label, index, extras = test[7]
    assert (index, label) == (7, 1)
    assert (extras["video_idx"], extras["temporal_idx"], extras["spatial_idx"]) == (
        1,
        0,
        1,
    )
    assert frames[0].shape == (3, 4, 20, 20)
    # Temporal view i of n starts at (40 - 8) * i / n.
    assert source_indices(test[0][0][0]) == [0, 2, 4, 7]
    assert source_indices(test[3][0][0]) == [16, 18, 20, 23]
    # The short video (12 frames) and the odd-sized one both load.
    assert test[3 * 6][0][0].shape == (3, 4, 20, 20)
    with pytest.raises(ValueError, match="grid"):
        test[(0, SamplingGrid.from_shape(cfg, 4, 16))]


def test_test_views_decode_once_for_their_crops(kinetics_root):
    cfg = tiny_cfg(kinetics_root)
    test = build_dataset("kinetics", cfg, "test")
    calls = []
    inner = test._load_clip
    test._load_clip = lambda *a: calls.append(a[:1] + a[2:3]) or inner(*a)
    items = [test[i] for i in range(len(test))]
    # 4 videos x 2 temporal views, each decoded once for its 3 crops.
    assert len(calls) == 8 and len(set(calls)) == 8
    fresh = build_dataset("kinetics", cfg, "test")
    for i in (0, 1, 2, 5, 7, 23):
        expected = fresh[i]
        assert torch.equal(items[i][0][0], expected[0][0])
        assert items[i][1:] == expected[1:]
    # Out of order, the view is decoded again: still the same items.
    assert torch.equal(test[1][0][0], items[1][0][0])
    assert torch.equal(test[9][0][0], items[9][0][0])
    assert len(calls) == 10
    # Three processes' shards of the test loader: contiguous blocks of 8, so only
    # the 2 views split at block edges are decoded twice (strided shards: 24).
    calls.clear()
    for rank in range(3):
        test._last_view = None  # each process has its own dataset
        for i in EvalShardSampler(len(test), 3, rank):
            test[i]
    assert len(calls) == 8 + 2
    del test._load_clip  # the counting wrapper does not pickle
    assert pickle.loads(pickle.dumps(test))._last_view is None


def test_slowfast_packing_and_multi_label(kinetics_root):
    cfg = tiny_cfg(kinetics_root, "kinetics", "MODEL.ARCH", "slowfast",
                   "MODEL.MODEL_NAME", "SlowFast", "SLOWFAST.ALPHA", 2,
                   "DATA.MULTI_LABEL", True)  # fmt: skip
    ds = build_dataset("kinetics", cfg, "val")
    (slow, fast), label, _, _ = ds[2]
    assert fast.shape == (3, 4, 20, 20) and slow.shape == (3, 2, 20, 20)
    assert torch.equal(slow, fast[:, [0, 3]])
    assert torch.equal(label, torch.tensor([0.0, 0.0, 1.0]))


def test_frame_cache_and_frames_backend_match(kinetics_root, tmp_path):
    plain = build_dataset("kinetics", tiny_cfg(kinetics_root), "test")
    cached = build_dataset(
        "kinetics",
        tiny_cfg(kinetics_root, "kinetics", "DATA_LOADER.FRAME_CACHE", True),
        "test",
    )
    for i in (0, 4, 11):
        assert torch.equal(plain[i][0][0], cached[i][0][0])
    assert cached.frame_cache().hits >= 1
    # Per-process state (cache, RGB converter) is not pickled to workers.
    clone = pickle.loads(pickle.dumps(cached))
    assert clone._cache is None and clone._reformatter is None
    assert torch.equal(clone[4][0][0], plain[4][0][0])
    # A Kinetics list of frame folders with the "frames" backend.
    from tests.helpers.video_utils import write_frames

    write_frames(str(tmp_path / "f0"), 40)
    for split in ("train", "val", "test"):
        write_kinetics_list(str(tmp_path / f"{split}.csv"), [("f0", 1)])
    cfg = tiny_cfg(str(tmp_path), "kinetics", "DATA.DECODING_BACKEND", "frames")
    assert source_indices(build_dataset("kinetics", cfg, "val")[0][0][0]) == [
        16,
        18,
        20,
        23,
    ]


def test_ssv2_splits(ssv2_root):
    cfg = tiny_cfg(ssv2_root, "ssv2")
    train = build_dataset("ssv2", cfg, "train")
    assert len(train) == 4 and train.video_labels() == [0, 1, 2, 0]
    frames, label, index, extras = train[(1, SamplingGrid.from_shape(cfg, 6, 12), 5)]
    assert frames[0].shape == (3, 6, 12, 12) and label == 1
    val = build_dataset("ssv2", cfg, "val")
    # Middle frame of each of 4 segments of a 10-frame video.
    assert source_indices(val[0][0][0]) == [1, 3, 5, 8]
    test = build_dataset("ssv2", cfg, "test")
    assert test.num_temporal_views == 1 and len(test) == 4 * 3
    frames, label, index, extras = test[5]
    assert (extras["video_idx"], extras["temporal_idx"], extras["spatial_idx"]) == (
        1,
        0,
        2,
    )
    assert frames[0].shape == (3, 4, 20, 20) and label == 1


def test_charades_labels_and_views(charades_root):
    cfg = tiny_cfg(charades_root, "charades")
    train = build_dataset("charades", cfg, "train")
    assert len(train) == 3
    seen = set()
    for seed in range(25):
        frames, label, _, _ = train[(0, None, seed)]
        idx = source_indices(frames[0])
        expect = torch.zeros(3)
        expect[0] = float(idx[0] < 10)
        expect[1] = float(idx[-1] >= 10)
        assert torch.equal(label, expect), (idx, label)  # union over the span
        seen.add(tuple(label.tolist()))
    assert len(seen) >= 2
    val = build_dataset("charades", cfg, "val")
    assert torch.equal(val[0][1], torch.tensor([1.0, 1.0, 0.0]))  # whole video
    assert torch.equal(val[2][1], torch.tensor([1.0, 0.0, 1.0]))
    assert [lab.tolist() for lab in val.video_labels()][1] == [0.0, 0.0, 1.0]
    test = build_dataset("charades", cfg, "test")
    assert len(test) == 3 * 2 * 3
    # Clip length 7 in 20 frames: starts 0 and 13 for 2 views.
    assert source_indices(test[0][0][0]) == [0, 2, 4, 6]
    assert source_indices(test[3][0][0]) == [13, 15, 17, 19]
    frames, label, index, extras = test[3]
    assert torch.equal(label, torch.tensor([1.0, 1.0, 0.0]))
    assert (extras["video_idx"], extras["temporal_idx"]) == (0, 1)
    # A 6-frame video shorter than the clip repeats its last frame.
    assert source_indices(test[12][0][0]) == [0, 2, 4, 5]


def _bad_root(tmp_path, names):
    root = str(tmp_path)
    rows = []
    for i, name in enumerate(names):
        path = os.path.join(root, f"{i}_{name}.mp4")
        if name == "good":
            write_video(path, 20)
        elif name == "empty":
            open(path, "wb").close()
        elif name == "truncated":
            data = open(write_video(path, 20), "rb").read()
            open(path, "wb").write(data[: len(data) // 2])
        rows.append((os.path.basename(path), 0))
    for split in ("train", "val", "test"):
        write_kinetics_list(os.path.join(root, f"{split}.csv"), rows)
    return root


def test_bad_videos_are_replaced_deterministically(tmp_path, caplog):
    names = ["good", "missing", "truncated", "empty", "good", "good"]
    cfg = tiny_cfg(_bad_root(tmp_path, names))
    ds = build_dataset("kinetics", cfg, "train")
    failed_total = 0
    with caplog.at_level(logging.WARNING, logger="slowfast.datasets.base"):
        for bad in (1, 2, 3):
            for seed in (11, 12):
                frames, _, index, extras = ds[(bad, None, seed)]
                again = ds[(bad, None, seed)]
                assert again[2] == index and torch.equal(again[0][0], frames[0])
                assert names[index] == "good" and extras["video_idx"] == index
                assert extras["num_failed"] >= 1
                failed_total += extras["num_failed"]
    for name in ("1_missing", "2_truncated", "3_empty"):
        lines = [r for r in caplog.records if name in r.getMessage()]
        assert len(lines) == 1, name  # logged once per process
    reasons = " ".join(r.getMessage() for r in caplog.records)
    assert "file not found" in reasons and "empty file" in reasons
    assert "cannot open" in reasons
    # Good entries load without failures.
    assert ds[(0, None, 3)][3]["num_failed"] == 0
    assert failed_total >= 6


def test_all_bad_dataset_fails_fast(tmp_path):
    cfg = tiny_cfg(_bad_root(tmp_path, ["missing", "empty", "missing"]))
    ds = build_dataset("kinetics", cfg, "train")
    start = time.time()
    with pytest.raises(DataError, match="in a row failed") as info:
        ds[(0, None, 1)]
    assert time.time() - start < 5
    assert "file not found" in str(info.value) and ".mp4" in str(info.value)


def test_eval_splits_raise_on_bad_video(tmp_path):
    cfg = tiny_cfg(_bad_root(tmp_path, ["good", "missing"]))
    for split in ("val", "test"):
        ds = build_dataset("kinetics", cfg, split)
        assert ds[0][3]["num_failed"] == 0
        bad = 1 if split == "val" else 6
        with pytest.raises(RuntimeError, match="1_missing.mp4: file not found"):
            ds[bad]


def test_malformed_list_and_bad_labels(tmp_path):
    root = str(tmp_path)
    with open(os.path.join(root, "train.csv"), "w") as f:
        f.write("a.mp4 0\nb.mp4\nc.mp4 1\n")
    with pytest.raises(ValueError) as info:
        build_dataset("kinetics", tiny_cfg(root), "train")
    msg = str(info.value)
    assert "train.csv:2" in msg and "'b.mp4'" in msg
    with open(os.path.join(root, "train.csv"), "w") as f:
        f.write("a.mp4 0\nb.mp4 x\n")
    with pytest.raises(ValueError, match=r"train.csv:2: label is not an integer"):
        build_dataset("kinetics", tiny_cfg(root), "train")
    with open(os.path.join(root, "train.csv"), "w") as f:
        f.write("a.mp4 0\nb.mp4 3\n")
    with pytest.raises(ValueError, match=r"train.csv:2: .*b.mp4: label 3 outside 0..2"):
        build_dataset("kinetics", tiny_cfg(root), "train")
    with pytest.raises(FileNotFoundError, match="val.csv"):
        build_dataset("kinetics", tiny_cfg(root), "val")
    with pytest.raises(KeyError, match="unknown dataset"):
        build_dataset("nope", tiny_cfg(root), "train")
    with pytest.raises(ValueError, match="split"):
        build_dataset("kinetics", tiny_cfg(root), "training")


def test_dataset_size(kinetics_root):
    cfg = tiny_cfg(kinetics_root)
    assert dataset_size(cfg, "train") == 4
    assert dataset_size(cfg, "test") == 24


def test_bad_data_monitor(caplog):
    monitor = BadDataMonitor(100, max_fraction=0.05)
    monitor.update(torch.tensor([0, 2, 1]))
    monitor.update(2)
    with caplog.at_level(logging.WARNING):
        assert monitor.end_epoch(3) == 5
    assert "Epoch 4: 5 of 100" in caplog.text  # logged 1-based
    assert monitor.end_epoch(4) == 0
    monitor.update([3, 2])
    with pytest.raises(DataError, match=r"6 videos failed .*=0.05 of 100 videos \(5\)"):
        monitor.update(torch.tensor([1]))
