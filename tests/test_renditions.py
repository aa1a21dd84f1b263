"""Tests of fast loading: prepared clips' encoding, renditions, JPEG decoding."""

import io
import json
import logging
import os
import random
import subprocess
import sys

import av
import numpy as np
import pytest
import torch
from PIL import Image

from slowfast.datasets import SamplingGrid, build_dataset
from slowfast.datasets.decoder import decode_pyav, decode_video
from slowfast.datasets.demo.footage import FootageSpec, make_footage
from slowfast.datasets.demo.writers import write_jpeg_frames, write_mp4
from slowfast.datasets.frames import image_size, load_image
from slowfast.datasets.lists import DataError
from slowfast.datasets.prepare.common import reencode
from slowfast.datasets.renditions import (
    MANIFEST,
    Renditions,
    load_renditions,
    rendition_path,
    scaled_size,
    suffix,
    write_renditions,
)
from slowfast.datasets.transforms import spatial_transform
from tests.tool_utils import REPO_ROOT, tool_path
from tests.video_utils import frame_index, tiny_cfg, write_kinetics_list, write_video

SCALES = (0.7071, 0.5)


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


def _clip_cfg(root, *opts):
    """Kinetics config over ``root``: 4 x 56 px clips from 64-80 px frames."""
    return tiny_cfg(
        str(root),
        "kinetics",
        "DATA.TRAIN_JITTER_SCALES", "[64, 80]", "DATA.TRAIN_CROP_SIZE", "56",
        "DATA.TEST_CROP_SIZE", "56", "DATA.RANDOM_FLIP", "False", *opts,
    )  # fmt: skip


def test_rendition_names_sizes_and_choice():
    assert suffix(0.7071) == ".r71" and suffix(0.5) == ".r50"
    assert scaled_size(340, 256, 0.7071) == (242, 182)
    assert scaled_size(340, 256, 0.5) == (170, 128)
    assert scaled_size(256, 340, 0.5) == (128, 170)
    assert rendition_path("a/b/c.mp4", 0.5) == "a/b/c.r50.mp4"
    assert rendition_path("f/vid/000001.jpg", 0.7071) == "f/vid.r71/000001.jpg"
    renditions = Renditions(SCALES)
    # The multigrid crops of a 224 base: 158 (x0.705) and 112 (x0.5).
    assert renditions.pick(158 / 224) == 0.7071
    assert renditions.pick(112 / 224) == 0.5
    assert renditions.pick(0.3) == 0.5
    assert renditions.pick(0.8) is None and renditions.pick(1.0) is None


def test_manifest_round_trip_and_one_line_errors(tmp_path):
    assert load_renditions(str(tmp_path)) is None
    write_renditions(str(tmp_path), [0.5, 0.7071])
    assert json.loads((tmp_path / MANIFEST).read_text()) == {"scales": [0.7071, 0.5]}
    assert load_renditions(str(tmp_path)) == Renditions((0.7071, 0.5))
    write_renditions(str(tmp_path), [])
    assert not (tmp_path / MANIFEST).exists()
    (tmp_path / MANIFEST).write_text('{"sizes": [128]}')
    with pytest.raises(ValueError, match=MANIFEST):
        load_renditions(str(tmp_path))
    # A dataset over a folder with a bad manifest stops at construction.
    write_kinetics_list(str(tmp_path / "train.csv"), [("v.mp4", 0)])
    with pytest.raises(DataError, match="renditions.json"):
        build_dataset("kinetics", tiny_cfg(str(tmp_path)), "train")


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


def test_renditions_keep_the_sampled_frames(tmp_path):
    """Grey frames whose value names their index: a coarse grid reads the same
    source frames from a rendition as from the original."""
    write_video(str(tmp_path / "src.mp4"), 90, 96, 64, gop=50)
    reencode(str(tmp_path / "src.mp4"), str(tmp_path / "v.mp4"), 64, renditions=SCALES)
    write_renditions(str(tmp_path), SCALES)
    write_kinetics_list(str(tmp_path / "train.csv"), [("v.mp4", 0)])
    on = build_dataset("kinetics", _clip_cfg(tmp_path), "train")
    off = build_dataset(
        "kinetics", _clip_cfg(tmp_path, "DATA.USE_RENDITIONS", "False"), "train"
    )
    grid = SamplingGrid.from_shape(on.cfg, 2, 28)
    assert on.rendition(grid) == 0.5 and off.rendition(grid) is None
    for seed in range(6):
        clip_on, clip_off = on[(0, grid, seed)][0][0], off[(0, grid, seed)][0][0]
        assert clip_on.shape == clip_off.shape == (3, 2, 28, 28)
        steps_on = [frame_index(v) for v in clip_on.float().mean(dim=(0, 2, 3))]
        steps_off = [frame_index(v) for v in clip_off.float().mean(dim=(0, 2, 3))]
        assert steps_on == steps_off


def _smooth_scene(root, backend: str):
    """A dataset of one 96 x 64 video of smooth moving waves, as an mp4 with
    renditions or as a frame folder with renditions."""
    y, x = np.mgrid[0:64, 0:96].astype(np.float32)
    frames = []
    for t in range(60):
        wave = np.sin(2 * np.pi * (x + 0.7 * t) / 41) * np.cos(2 * np.pi * y / 37)
        blob = np.exp(-((x - 30 - t / 2) ** 2 + (y - 30) ** 2) / 120)
        rgb = [128 + 70 * wave, 128 + 100 * blob - 40 * wave, 100 + 50 * np.cos(x / 9)]
        frames.append(np.clip(np.stack(rgb, -1), 0, 255).astype(np.uint8))
    frames = np.stack(frames)
    if backend == "pyav":
        write_mp4(str(root / "src.mp4"), frames, 30, "libx264")
        reencode(str(root / "src.mp4"), str(root / "v.mp4"), 64, renditions=SCALES)
        entry = "v.mp4"
    else:
        write_jpeg_frames(str(root), "v", "{:06d}.jpg", frames, scales=SCALES)
        entry = "v"
    write_renditions(str(root), SCALES)
    write_kinetics_list(str(root / "train.csv"), [(entry, 0)])


@pytest.mark.parametrize("backend", ["pyav", "frames"])
def test_coarse_grids_read_renditions_with_the_same_field_of_view(tmp_path, backend):
    _smooth_scene(tmp_path, backend)
    opts = ["DATA.DECODING_BACKEND", backend]
    on = build_dataset("kinetics", _clip_cfg(tmp_path, *opts), "train")
    off_cfg = _clip_cfg(tmp_path, *opts, "DATA.USE_RENDITIONS", "False")
    off = build_dataset("kinetics", off_cfg, "train")
    assert on.rendition(on.base_grid) is None
    for crop, scale in ((40, 0.7071), (28, 0.5)):
        grid = SamplingGrid.from_shape(on.cfg, 4, crop)
        assert on.rendition(grid) == scale
        same, other = [], []
        for seed in range(8):
            a = on[(0, grid, seed)][0][0].float()
            b = off[(0, grid, seed)][0][0].float()
            c = off[(0, grid, seed + 100)][0][0].float()  # another view
            same.append((a - b).abs().mean().item())
            other.append((b - c).abs().mean().item())
        # The same view up to resampling (a sub-pixel shift of these waves
        # costs a few grey levels): far below another view's difference.
        assert np.mean(same) < 0.25 * np.mean(other), (crop, same, other)


def _ramps(height: int, width: int, orig_h: int, orig_w: int) -> torch.Tensor:
    """Frames whose red / green values give each pixel's centre in the
    coordinates of a ``orig_h x orig_w`` original (x 2 and x 3)."""
    x = (np.arange(width) + 0.5) * orig_w / width - 0.5
    y = (np.arange(height) + 0.5) * orig_h / height - 0.5
    frame = np.zeros((height, width, 3), np.float32)
    frame[..., 0] = 20 + 2 * x[None, :]
    frame[..., 1] = 20 + 3 * y[:, None]
    return torch.from_numpy(np.repeat(frame[None], 2, 0).round().astype(np.uint8))


@pytest.mark.parametrize("scale", [0.7071, 0.5])
def test_rendition_crops_cover_the_original_field_of_view(scale):
    """A crop of a rendition, placed with the original's geometry, sees the
    original's pixels to within one rendition pixel."""
    # 98 x 64: neither rendition keeps the aspect ratio exactly.
    original = _ramps(64, 98, 64, 98)
    small_w, small_h = scaled_size(98, 64, scale)
    assert small_w / small_h != 98 / 64
    small = _ramps(small_h, small_w, 64, 98)
    errors = []
    for seed in range(20):
        short = 64 + seed  # the jittered short side (64-83) and 40 px crops
        a = spatial_transform(original, short, 40, -1, True, random.Random(seed))
        b = spatial_transform(
            small, short, 40, -1, True, random.Random(seed), geometry=(64, 98)
        )
        dx = (a[:, 0].float() - b[:, 0].float()) / 2  # original pixels
        dy = (a[:, 1].float() - b[:, 1].float()) / 3
        errors.append(max(dx.abs().mean().item(), dy.abs().mean().item()))
    assert max(errors) < 1.0 / scale, errors


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


def test_missing_rendition_reads_the_original_and_warns_once(tmp_path, caplog):
    write_video(str(tmp_path / "src.mp4"), 40, 96, 64)
    reencode(str(tmp_path / "src.mp4"), str(tmp_path / "v.mp4"), 64, renditions=SCALES)
    write_renditions(str(tmp_path), SCALES)
    os.remove(rendition_path(str(tmp_path / "v.mp4"), 0.5))
    write_kinetics_list(str(tmp_path / "train.csv"), [("v.mp4", 0)])
    ds = build_dataset("kinetics", _clip_cfg(tmp_path), "train")
    grid = SamplingGrid.from_shape(ds.cfg, 4, 28)
    off_cfg = _clip_cfg(tmp_path, "DATA.USE_RENDITIONS", "False")
    off = build_dataset("kinetics", off_cfg, "train")
    with caplog.at_level(logging.WARNING):
        for seed in range(3):
            frames, _, index, extras = ds[(0, grid, seed)]
            assert frames[0].shape == (3, 4, 28, 28)
            assert index == 0 and extras["num_failed"] == 0
            # The original is read with the clip's own random draws.
            assert torch.equal(frames[0], off[(0, grid, seed)][0][0])
    warnings = [r for r in caplog.records if "Rendition 0.5" in r.getMessage()]
    assert len(warnings) == 1 and "prepare_dataset" in warnings[0].getMessage()


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

    from slowfast.datasets.verify import verify_split

    root = tmp_path / "prepared"
    shutil.copytree(footage / "prepared", root)
    cfg = _clip_cfg(root, "MODEL.NUM_CLASSES", "4")
    assert verify_split(cfg, "train", allow_short=True).problems == []
    victim = root / "videos" / "train" / "footage00001_000000_000010.r50.mp4"
    victim.unlink()
    problems = verify_split(cfg, "train", allow_short=True).problems
    assert len(problems) == 1 and "rendition 0.5 missing" in problems[0].reason
    assert str(victim) in problems[0].reason
    # Evaluation splits read the originals: nothing to report there.
    assert verify_split(cfg, "val", allow_short=True).problems == []


@pytest.mark.parametrize("backend", ["pyav", "frames"])
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
    ds = build_dataset("kinetics", _clip_cfg(tmp_path, *args[6:8]), "train")
    grid = SamplingGrid.from_shape(ds.cfg, 4, 28)
    assert ds.rendition(grid) == 0.5
    assert ds[(0, grid, 3)][0][0].shape == (3, 4, 28, 28)


def test_frames_extracted_before_get_their_renditions(tmp_path):
    from slowfast.datasets.prepare.common import video_to_frames

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
