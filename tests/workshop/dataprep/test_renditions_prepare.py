"""Preparing fast-loading data and reading it back: prepared clips' keyframe
interval and encoder settings, exact frame selection, frame-folder renditions,
JPEG decoding, and the tools (prepare_dataset's rendition options,
add_renditions, verification of missing renditions)."""

import io
import json
import os
import subprocess
import sys

import av
import numpy as np
import pytest
import torch
from PIL import Image

from slowfast.datasets import SamplingGrid, build_dataset
from slowfast.datasets.decoding.decoder import decode_pyav, decode_video
from slowfast.datasets.decoding.frames import image_size, load_image
from slowfast.datasets.renditions.files import (
    MANIFEST,
    Renditions,
    load_renditions,
    rendition_path,
    suffix,
)
from tests.helpers.rendition_utils import SCALES, clip_cfg
from tests.helpers.tool_utils import REPO_ROOT, tool_path
from tests.helpers.video_utils import frame_index, write_video
from workshop.dataprep.demo.footage import FootageSpec, make_footage


def run_tool(name: str, *args: str) -> subprocess.CompletedProcess:
    """Runs ``tools/<name>`` as a user would."""
    cmd = [sys.executable, tool_path(name), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


SPEC = FootageSpec(width=96, height=64, seconds=2.0)


def _prepare(footage, out, *extra: str) -> None:
    """``prepare_dataset.py kinetics`` on the footage downloads, short side 64."""
    result = run_tool(
        "prepare_dataset.py", "kinetics",
        "--annotations", str(footage / "annotations"),
        "--videos", str(footage / "downloads"), "--out", str(out),
        "--short-side", "64", "--workers", "1", "--no-verify", *extra,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.fixture(scope="module")
def footage(tmp_path_factory):
    """Kinetics-like downloads (and frame folders), prepared as a user would."""
    root = tmp_path_factory.mktemp("footage")
    make_footage(str(root), 3, 1, seed=0, spec=SPEC)
    _prepare(root, root / "prepared")
    return root


@pytest.mark.slow
def test_prepared_clips_keyframe_interval_and_encoder_settings(footage):
    folder = footage / "prepared" / "videos" / "train"
    full = str(folder / "footage00000_000000_000010.mp4")
    expected = {full: ((96, 64), 30)}
    expected[rendition_path(full, 0.7071)] = ((68, 46), 8)
    expected[rendition_path(full, 0.5)] = ((48, 32), 8)
    for path, (size, gop) in expected.items():
        frames, times, _ = decode_video(path)
        assert frames.shape == (60, size[1], size[0], 3), path
        with av.open(path) as container:
            decoded = container.decode(video=0)
            keys = [i for i, frame in enumerate(decoded) if frame.key_frame]
        assert keys == list(range(0, 60, gop)), path
        # x264 writes its settings into the stream: fast decoding (CAVLC, no
        # deblocking), B-frames no frame references, the keyframe interval.
        data = open(path, "rb").read()
        for setting in (b"cabac=0", b"deblock=0", b"b_pyramid=0", b"keyint=%d" % gop):
            assert setting in data, (path, setting)
    assert json.loads((footage / "prepared" / MANIFEST).read_text()) == {
        "scales": [0.7071, 0.5]
    }


@pytest.mark.parametrize("scale", [None, 0.7071, 0.5])
def test_selected_frames_equal_a_full_decode(footage, scale):
    path = str(footage / "prepared" / "videos" / "train")
    path = os.path.join(path, "footage00001_000000_000010.mp4")
    if scale:
        path = rendition_path(path, scale)
    frames, _, _ = decode_video(path)
    for positions in ([0, 5, 9.5, 13, 29.9, 30, 31, 59], [40.2, 2, 33, 33, 17], [55]):

        def sample(num, fps, positions=positions):
            assert (num, fps) == (60, 30)
            return np.asarray(positions, dtype=np.float64)

        clip = decode_pyav(path, sample)
        assert torch.equal(clip, frames[np.floor(positions).astype(int)])


def test_frame_folder_renditions_are_scaled_copies(footage):
    folder = footage / "frames" / "videos" / "footage00002_000000_000010"
    names = sorted(n for n in os.listdir(folder) if n.endswith(".jpg"))
    full = load_image(str(folder / names[0]))
    assert full.shape == (64, 96, 3)
    for scale, shape in ((0.7071, (46, 68, 3)), (0.5, (32, 48, 3))):
        small = load_image(rendition_path(str(folder / names[0]), scale))
        assert small.shape == shape
        assert sorted(os.listdir(str(folder) + suffix(scale))) == names
        assert image_size(rendition_path(str(folder / names[0]), scale)) == shape[:2]
        resized = np.asarray(Image.fromarray(full).resize(shape[1::-1], Image.BILINEAR))
        # The resized original, up to JPEG coding of its fine texture.
        assert np.abs(small.astype(float) - resized).mean() < 10


def test_jpeg_decoding_matches_pillow(tmp_path):
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 255, (30, 44, 3), dtype=np.uint8)
    grey = rng.integers(0, 255, (30, 44), dtype=np.uint8)
    for name, image in (("rgb.jpg", rgb), ("grey.jpg", grey), ("rgb.png", rgb)):
        Image.fromarray(image).save(tmp_path / name, quality=90)
        with Image.open(tmp_path / name) as img:
            expected = np.asarray(img.convert("RGB"))
        got = load_image(str(tmp_path / name))
        assert got.shape == (30, 44, 3) and np.array_equal(got, expected), name
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="JPEG")
    (tmp_path / "cut.jpg").write_bytes(buffer.getvalue()[:200])
    with pytest.raises(Exception, match="cut.jpg"):
        load_image(str(tmp_path / "cut.jpg"))


@pytest.mark.slow
def test_prepare_dataset_rendition_options(footage, tmp_path):
    _prepare(footage, tmp_path / "out", "--renditions", "none")
    assert not (tmp_path / "out" / MANIFEST).exists()
    assert not list((tmp_path / "out" / "videos" / "train").glob("*.r*.mp4"))
    bad = run_tool(
        "prepare_dataset.py", "kinetics", "--annotations", "a", "--videos", "v",
        "--out", "o", "--renditions", "1.5",
    )  # fmt: skip
    assert bad.returncode == 2 and "--renditions 1.5" in bad.stderr


def test_verify_reports_a_missing_rendition(footage, tmp_path):
    import shutil

    from workshop.dataprep.verify import verify_split

    root = tmp_path / "prepared"
    shutil.copytree(footage / "prepared", root)
    cfg = clip_cfg(root, "MODEL.NUM_CLASSES", "4")
    assert verify_split(cfg, "train", allow_short=True).problems == []
    victim = root / "videos" / "train" / "footage00001_000000_000010.r50.mp4"
    victim.unlink()
    problems = verify_split(cfg, "train", allow_short=True).problems
    assert len(problems) == 1 and "rendition 0.5 missing" in problems[0].reason
    assert str(victim) in problems[0].reason
    # Evaluation splits read the originals: nothing to report there.
    assert verify_split(cfg, "val", allow_short=True).problems == []


@pytest.mark.parametrize("backend", ["pyav", "frames"])
@pytest.mark.slow
def test_add_renditions_to_a_dataset_prepared_elsewhere(footage, tmp_path, backend):
    import shutil

    if backend == "pyav":
        _prepare(footage, tmp_path, "--renditions", "none")
        original = tmp_path / "videos" / "train" / "footage00000_000000_000010.mp4"
    else:
        shutil.copytree(
            footage / "frames",
            tmp_path,
            ignore=shutil.ignore_patterns("*.r71", "*.r50", MANIFEST),
            dirs_exist_ok=True,
        )
        original = tmp_path / "videos" / "footage00000_000000_000010" / "000001.jpg"
    assert not (tmp_path / MANIFEST).exists()
    cfg_file = os.path.join(REPO_ROOT, "configs/Kinetics/I3D_8x8_R50_multigrid.yaml")
    args = ["--cfg", cfg_file]
    args += ["DATA.PATH_TO_DATA_DIR", str(tmp_path), "DATA.PATH_PREFIX", str(tmp_path)]
    args += ["DATA.DECODING_BACKEND", backend, "--workers", "1"]
    result = run_tool("add_renditions.py", *args)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "renditions [0.7071, 0.5] of 3 training videos" in result.stdout
    assert load_renditions(str(tmp_path)) == Renditions(SCALES)
    for scale, size in ((0.7071, (46, 68)), (0.5, (32, 48))):
        path = rendition_path(str(original), scale)
        if backend == "pyav":
            clip, _, info = decode_video(path)
            assert clip.shape[1:3] == size and info.original_size == (64, 96)
        else:
            assert image_size(path) == size
    again = run_tool("add_renditions.py", *args)  # finished videos are skipped
    assert again.returncode == 0 and "(0 failed)" in again.stderr
    ds = build_dataset("kinetics", clip_cfg(tmp_path, *args[6:8]), "train")
    grid = SamplingGrid.from_shape(ds.cfg, 4, 28)
    assert ds.rendition(grid) == 0.5
    assert ds[(0, grid, 3)][0][0].shape == (3, 4, 28, 28)


def test_frames_extracted_before_get_their_renditions(tmp_path):
    from workshop.dataprep.prepare.common import video_to_frames

    write_video(str(tmp_path / "v.mp4"), 6, 96, 64)
    item = ("v", str(tmp_path / "v.mp4"), str(tmp_path / "out"), 30.0, "{:06d}.jpg")
    paths = video_to_frames(item + ((),))  # no renditions asked for
    assert len(paths) == 6 and not (tmp_path / "out" / "frames" / "v.r50").exists()
    assert video_to_frames(item + (SCALES,)) == paths  # run again with them
    for scale, size in ((0.7071, (46, 68)), (0.5, (32, 48))):
        folder = tmp_path / "out" / "frames" / f"v{suffix(scale)}"
        assert sorted(os.listdir(folder)) == [os.path.basename(p) for p in paths]
        assert image_size(str(folder / "000001.jpg")) == size


def test_scales_that_share_a_file_name_are_refused(tmp_path):
    bad = run_tool(
        "prepare_dataset.py", "kinetics", "--annotations", "a", "--videos", "v",
        "--out", "o", "--renditions", "0.706,0.7071",
    )  # fmt: skip
    assert bad.returncode == 2 and "share file names (.r71, .r71)" in bad.stderr
    (tmp_path / MANIFEST).write_text('{"scales": [0.5, 0.501]}')
    with pytest.raises(ValueError, match="share file names"):
        load_renditions(str(tmp_path))


def test_mp4_named_file_of_another_format_is_probed(tmp_path):
    """MPEG-TS data under an .mp4 name: the header-only open fails, probing
    opens it."""
    from fractions import Fraction

    path = str(tmp_path / "ts.mp4")
    with av.open(path, "w", format="mpegts") as container:
        stream = container.add_stream("mpeg2video", rate=30)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(10):
            frame = av.VideoFrame.from_ndarray(
                np.full((48, 64, 3), 8 + 4 * i, np.uint8), format="rgb24"
            )
            frame.pts, frame.time_base = i, Fraction(1, 30)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    frames, _, _ = decode_video(path)
    assert frames.shape[0] == 10
    clip = decode_pyav(path, lambda n, fps: np.array([2.0, 5.0]))
    assert [frame_index(v) for v in clip.float().mean(dim=(1, 2, 3))] == [2, 5]
