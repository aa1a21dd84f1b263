"""tools/prepare_dataset.py on small downloads in the official folder structures."""

import csv
import json
import os
import subprocess
import sys
from fractions import Fraction

import av
import numpy as np
import pytest

from slowfast.config import load_config
from tests.conftest import REPO_ROOT
from workshop.dataprep.demo.writers import write_jpeg_frames, write_mp4

TOOL = os.path.join(REPO_ROOT, "tools", "prepare_dataset.py")
DEMO = os.path.join(REPO_ROOT, "configs", "Demo")


def _frames(seed, count=24, height=48, width=64):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
    return np.stack([np.roll(base, 2 * t, axis=1) for t in range(count)])


def _write_webm(path, frames, fps=12):
    with av.open(path, mode="w", format="webm") as container:
        stream = container.add_stream("libvpx", rate=fps)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        for index, frame in enumerate(frames):
            video = av.VideoFrame.from_ndarray(frame, format="rgb24")
            video.pts, video.time_base = index, Fraction(1, fps)
            container.mux(stream.encode(video))
        container.mux(stream.encode(None))


def _run(*args, check=True):
    cmd = [sys.executable, TOOL, *map(str, args)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if check:
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result


def _train_one_epoch(config, out, *opts):
    from slowfast.engine.trainer import train

    cfg = load_config(
        [os.path.join(DEMO, config)],
        ["DATA.PATH_TO_DATA_DIR", str(out), "DATA.PATH_PREFIX", str(out),
         "OUTPUT_DIR", str(out / "run"), "SOLVER.MAX_EPOCH", "1", "SOLVER.STEPS",
         "[0]", "SOLVER.LRS", "[1]", "TRAIN.BATCH_SIZE", "1", "TEST.ENABLE", "False",
         "DATA_LOADER.NUM_WORKERS", "0", "LOG_MODEL_INFO", "False",
         "BN.USE_PRECISE_STATS", "False", "SOLVER.WARMUP_EPOCHS", "0.0", *opts],
    )  # fmt: skip
    train(cfg)
    assert (out / "run" / "checkpoints" / "checkpoint_epoch_00001.pyth").exists()


def _write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


@pytest.mark.slow
def test_kinetics_from_the_official_csvs_and_clips(tmp_path):
    ann, videos, out = tmp_path / "ann", tmp_path / "dl", tmp_path / "k"
    ann.mkdir()
    header = ["label", "youtube_id", "time_start", "time_end", "split", "is_cc"]
    train = [
        ("abseiling", f"tr_{i:08d}", 10 * i, 10 * i + 10, "train", 0) for i in range(3)
    ]
    train += [("bowling", f"tb_{i:08d}", 5, 15, "train", 0) for i in range(3)]
    val = [
        ("bowling", "va_00000001", 0, 10, "val", 0),
        ("abseiling", "va_00000002", 3, 13, "val", 0),
    ]
    _write_csv(ann / "train.csv", header, train)
    _write_csv(ann / "validate.csv", header, val)
    _write_csv(
        ann / "test.csv", header[1:], [(r[1], r[2], r[3], "test", 0) for r in val]
    )
    for k, row in enumerate(train[:-1] + val):  # the last train clip is missing
        name = f"{row[1]}_{row[2]:06d}_{row[3]:06d}.mp4"
        write_mp4(str(videos / row[0] / name), _frames(k), 12, "mpeg4")
    result = _run("kinetics", "--annotations", ann, "--videos", videos, "--out", out,
                  "--short-side", "32", "--workers", "2", "--cfg",
                  os.path.join(DEMO, "Kinetics_I3D_tiny.yaml"))  # fmt: skip
    assert (
        "note: test.csv has no labels: our test.csv lists the val clips"
        in result.stdout
    )
    assert "1 item(s) failed or are missing" in result.stdout
    failed = (out / "failed_kinetics.txt").read_text()
    assert failed.startswith("tb_00000002_000005_000015\tclip not found")
    assert json.loads((out / "classids.json").read_text()) == {
        "abseiling": 0,
        "bowling": 1,
    }
    lines = (out / "train.csv").read_text().splitlines()
    assert (
        len(lines) == 5 and lines[0] == "videos/train/tr_00000000_000000_000010.mp4 0"
    )
    assert (out / "test.csv").read_text() == (out / "val.csv").read_text()
    with av.open(str(out / lines[0].split()[0])) as container:
        stream = container.streams.video[0]
        assert min(stream.width, stream.height) == 32 and not container.streams.audio
    # Run again: finished clips are skipped, the lists are the same.
    again = _run("kinetics", "--annotations", ann, "--videos", videos, "--out", out,
                 "--short-side", "32", "--workers", "1", "--no-verify")  # fmt: skip
    assert "kinetics clips: 7/7" in again.stderr
    assert (out / "train.csv").read_text().splitlines() == lines
    _train_one_epoch("Kinetics_I3D_tiny.yaml", out)


@pytest.mark.slow
def test_ssv2_from_the_json_files_and_webm(tmp_path):
    ann, videos, out = tmp_path / "ann", tmp_path / "dl", tmp_path / "s"
    ann.mkdir()
    videos.mkdir()
    templates = ["Moving [something] up", "Moving [something] down"]
    labels = {
        t.replace("[", "").replace("]", ""): str(i) for i, t in enumerate(templates)
    }
    (ann / "something-something-v2-labels.json").write_text(json.dumps(labels))
    for name, ids in (("train", range(1, 5)), ("validation", range(11, 13))):
        entries = [
            {
                "id": str(i),
                "label": "x",
                "template": templates[i % 2],
                "placeholders": ["x"],
            }
            for i in ids
        ]
        (ann / f"something-something-v2-{name}.json").write_text(json.dumps(entries))
        for i in ids:
            _write_webm(str(videos / f"{i}.webm"), _frames(i))  # 2 s at 12 fps
    ssv2_cfg = os.path.join(DEMO, "SSv2_I3D_tiny.yaml")
    _run("ssv2", "--annotations", ann, "--videos", videos, "--out", out,
         "--workers", "1", "--cfg", ssv2_cfg)  # fmt: skip
    rows = (out / "train.csv").read_text().splitlines()
    assert rows[0] == "original_vido_id video_id frame_id path labels"
    # 24 frames at 12 fps span 23/12 s: 58 frames at the default 30 fps.
    assert len(rows) == 1 + 4 * 58
    assert rows[1].startswith('1 0 0 frames/1/1_000001.jpg ""')
    _train_one_epoch("SSv2_I3D_tiny.yaml", out, "MODEL.NUM_CLASSES", "2")


def test_videos_that_fail_to_decode_past_max_failed_end_the_run(tmp_path):
    ann, videos = tmp_path / "ann", tmp_path / "dl"
    ann.mkdir()
    videos.mkdir()
    (ann / "something-something-v2-labels.json").write_text('{"Moving x up": "0"}')
    for name, ids in (("train", range(1, 4)), ("validation", range(11, 12))):
        entries = [{"id": str(i), "template": "Moving [x] up"} for i in ids]
        (ann / f"something-something-v2-{name}.json").write_text(json.dumps(entries))
    for i in (1, 2, 11):
        _write_webm(str(videos / f"{i}.webm"), _frames(i))
    (videos / "3.webm").write_bytes(b"not a video")  # 1 of the 4 found
    args = ["ssv2", "--annotations", ann, "--videos", videos, "--workers", "1",
            "--no-verify", "--out"]  # fmt: skip
    failed = _run(*args, tmp_path / "a", check=False)
    assert failed.returncode == 1
    assert failed.stderr.splitlines()[-1].startswith(
        "error: 1 of 4 videos failed to convert or decode, more than --max-failed "
        "0.05 of them"
    )
    assert (tmp_path / "a" / "failed_ssv2.txt").read_text().startswith("3\t")
    _run(*args, tmp_path / "b", "--max-failed", "0.25")  # 1 of 4 is allowed


@pytest.mark.parametrize("source", ["videos", "official frames"])
@pytest.mark.slow
def test_charades_from_the_csvs_with_per_frame_labels(tmp_path, source):
    ann, videos, out = tmp_path / "ann", tmp_path / "dl", tmp_path / "c"
    ann.mkdir()
    header = ["id", "subject", "scene", "actions", "length"]
    train = [
        ("AB12C", "s", "k", "c003 0.00 0.50;c007 0.40 1.90", 2.0),
        ("DE34F", "s", "k", "c001 1.00 2.00", 2.0),
    ]
    test = [("GH56I", "s", "k", "c003 0.00 2.00", 2.0)]  # fmt: skip
    _write_csv(ann / "Charades_v1_train.csv", header, train)
    _write_csv(ann / "Charades_v1_test.csv", header, test)
    for k, (vid, *_) in enumerate(train + test):
        if source == "videos":
            write_mp4(str(videos / f"{vid}.mp4"), _frames(k, count=48), 24, "mpeg4")
        else:
            frames = _frames(k, count=48)
            write_jpeg_frames(str(videos), vid, vid + "-{:06d}.jpg", frames)
    charades_cfg = os.path.join(DEMO, "Charades_I3D_tiny.yaml")
    _run("charades", "--annotations", ann, "--videos", videos, "--out", out,
         "--workers", "1", "--cfg", charades_cfg)  # fmt: skip
    lines = (out / "train.csv").read_text().splitlines()[1:]
    rows = [line.split(" ", 4) for line in lines]
    first = [r for r in rows if r[0] == "AB12C"]
    assert len(first) == 48  # 2 s at 24 fps
    assert first[0][4] == '"3"' and first[10][4] == '"3,7"' and first[20][4] == '"7"'
    assert first[47][4] == '""'
    _train_one_epoch("Charades_I3D_tiny.yaml", out)


def test_missing_folders_and_files_are_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    gone = tmp_path / "gone"
    for args, status, start in (
        (("--annotations", gone, "--videos", empty), 2, f"error: --annotations {gone}"),
        (("--annotations", empty, "--videos", gone), 2, f"error: --videos {gone}"),
        (("--annotations", empty, "--videos", empty), 1, f"error: {empty}: no train"),
    ):
        result = _run("kinetics", *args, "--out", tmp_path / "out", check=False)
        assert result.returncode == status, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(start), result.stderr
