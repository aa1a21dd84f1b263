"""Tests of tools/predict.py: Moving Digits videos through a tiny I3D checkpoint."""

import json
import os
import shlex
import subprocess
import sys

import pytest
import torch

from slowfast.checkpoint.save import save_weights
from slowfast.datasets.class_names import read_class_names
from slowfast.datasets.kinetics import Kinetics
from slowfast.datasets.lists import DataError
from slowfast.datasets.video_files import VideoFiles
from slowfast.engine import predict as engine_predict
from slowfast.launch.config import load_run_config
from slowfast.launch.predict import split_inputs
from slowfast.models import build_model
from tests.helpers.tool_utils import REPO_ROOT, load_tool, tool_path
from tests.helpers.video_utils import write_truncated_video
from workshop.dataprep.demo.digits import load_digit_bank
from workshop.dataprep.demo.generate import video_rng
from workshop.dataprep.demo.scenes import kinetics_scene
from workshop.dataprep.demo.specs import get_spec
from workshop.dataprep.demo.writers import pick_codec, write_mp4

predict_tool = load_tool("predict.py")
check_docs = load_tool("dev/check_docs.py")

CFG = "configs/Demo/Kinetics_I3D_tiny.yaml"
FAVOURED = 4  # the class the checkpoint's classifier bias favours
DIGITS = (3, 7)
NAMES = "zero one two three four five six seven eight nine".split()
# 2 temporal views x 3 crops, set on the command line.
OVERRIDES = ["TEST.NUM_ENSEMBLE_VIEWS", "2", "DATA_LOADER.FRAME_CACHE", "False"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two Moving Digits videos, a truncated one, a checkpoint favouring
    class FAVOURED and label files, in one folder."""
    root = tmp_path_factory.mktemp("predict")
    spec, bank = get_spec("kinetics", "tiny"), load_digit_bank()
    for digit in DIGITS:
        rng = video_rng(0, "kinetics", "test", digit)
        frames = kinetics_scene(rng, bank, "heldout", digit, spec)
        write_mp4(str(root / f"digit_{digit}.mp4"), frames, spec.fps, pick_codec())
    write_truncated_video(str(root / "truncated.mp4"), num_frames=60, keep=20)
    cfg = load_run_config([os.path.join(REPO_ROOT, CFG)], [])
    torch.manual_seed(0)
    model = build_model(cfg)
    with torch.no_grad():
        model.head.projection.bias.zero_()
        model.head.projection.bias[FAVOURED] = 8.0
    save_weights(str(root / "favour.pyth"), model, cfg)
    rows = "".join(f"{i},{name}\n" for i, name in enumerate(NAMES))
    (root / "labels.csv").write_text("id,name\n" + rows)
    (root / "short.txt").write_text("\n".join(NAMES[:9]) + "\n")
    return root


def _run(*args):
    return subprocess.run(
        [sys.executable, tool_path("predict.py"), "--cfg", CFG, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )


def _check_top(top, k=5):
    scores = [entry["score"] for entry in top]
    assert len(top) == k
    assert scores == sorted(scores, reverse=True)
    assert 0 < sum(scores) <= 1 + 1e-5
    assert len({entry["class"] for entry in top}) == k
    assert top[0]["class"] == FAVOURED


def test_json_one_object_per_video_and_a_bad_video_reported(files):
    videos = [files / "digit_3.mp4", files / "truncated.mp4", files / "digit_7.mp4"]
    proc = _run("--checkpoint", files / "favour.pyth", *videos, "--json", *OVERRIDES)
    assert proc.returncode == 1, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["video"] for r in records] == [str(videos[0]), str(videos[2])]
    for record in records:
        assert set(record) == {"video", "views", "activation", "ensemble", "top"}
        assert record["views"] == 6
        assert (record["activation"], record["ensemble"]) == ("softmax", "mean")
        assert all(set(e) == {"class", "name", "score"} for e in record["top"])
        assert all(e["name"] is None for e in record["top"])
        _check_top(record["top"])
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "truncated.mp4: truncated" in errors[0]


def test_text_with_class_names_from_a_csv(files):
    video = files / "digit_7.mp4"
    proc = _run(
        video, "--checkpoint", files / "favour.pyth", "--labels", files / "labels.csv"
    )
    assert proc.returncode == 0, proc.stderr
    head, *rows = proc.stdout.splitlines()
    assert head == f"{video} (mean softmax of 9 views)"
    assert len(rows) == 5
    assert rows[0].split()[1:] == [NAMES[FAVOURED], f"({FAVOURED})"]
    scores = [float(row.split()[0]) for row in rows]
    assert scores == sorted(scores, reverse=True) and sum(scores) <= 1 + 1e-3


def _main(capsys, *args):
    """The tool in this process: (exit status, stdout, stderr)."""
    status = predict_tool.main(["--cfg", CFG, *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(
    "case, expected",
    [
        ("labels", "short.txt: 9 class names, but the model has 10 classes"),
        ("checkpoint", "missing.pyth: checkpoint file not found"),
        ("video", "missing.mp4: file not found"),
    ],
)
def test_user_errors_are_one_line_before_the_model(
    files, capsys, monkeypatch, case, expected
):
    def no_model(*args, **kwargs):
        raise AssertionError("the model was built")

    monkeypatch.setattr(engine_predict, "build_model", no_model)
    video = files / ("missing.mp4" if case == "video" else "digit_3.mp4")
    ckpt = files / ("missing.pyth" if case == "checkpoint" else "favour.pyth")
    args = [video, "--checkpoint", ckpt, "--labels", files / "short.txt"]
    status, out, err = _main(capsys, *args)
    assert status == 1 and out == ""
    lines = [line for line in err.splitlines() if not line.startswith("INFO")]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert expected in lines[0]


def test_views_are_the_kinetics_test_splits(files):
    """Entry for entry, the tool's views of a video are the tester's."""
    videos = [str(files / f"digit_{digit}.mp4") for digit in DIGITS]
    (files / "test.csv").write_text("".join(f"{v} 0\n" for v in videos))
    opts = ["DATA.PATH_TO_DATA_DIR", str(files), "DATA.PATH_PREFIX", ""]
    cfg = load_run_config([os.path.join(REPO_ROOT, CFG)], opts + OVERRIDES)
    tester, ours = Kinetics(cfg, "test"), VideoFiles(cfg, videos)
    assert len(ours) == len(tester) == 2 * 6
    assert ours.views_of(1) == list(range(6, 12))
    for index in range(len(tester)):
        (theirs, _, _, their_extras), (mine, _, _, extras) = tester[index], ours[index]
        assert extras == their_extras
        assert all(torch.equal(a, b) for a, b in zip(theirs, mine))


def test_label_file_formats(tmp_path):
    quoted = {f'"{name}"': i for i, name in enumerate(NAMES)}  # PySlowFast's JSON
    formats = {
        "kinetics_classnames.json": json.dumps(quoted),
        "by_id.json": json.dumps({str(i): n for i, n in enumerate(NAMES)}),
        "ssv2_style.json": json.dumps({n: str(i) for i, n in enumerate(NAMES)}),
        "rows.csv": "".join(f"{i},{n}\n" for i, n in reversed(list(enumerate(NAMES)))),
        "names.txt": "\n".join(NAMES) + "\n\n",
    }
    for name, text in formats.items():
        (tmp_path / name).write_text(text)
        assert read_class_names(str(tmp_path / name)) == NAMES, name
    (tmp_path / "gap.csv").write_text("0,zero\n2,two\n")
    with pytest.raises(DataError, match="gap.csv: class ids must be 0 .. 1"):
        read_class_names(str(tmp_path / "gap.csv"))


def test_videos_options_and_overrides_split():
    args = predict_tool.parse_args(
        ["--cfg", CFG, "a.mp4", "b.mp4", "--json", "TEST.BATCH_SIZE", "4", "RNG_SEED"]
        + ["-1", "--top", "3"]
    )
    assert (args.videos, args.json, args.top) == (["a.mp4", "b.mp4"], True, 3)
    assert args.opts == ["TEST.BATCH_SIZE", "4", "RNG_SEED", "-1"]
    assert split_inputs(["x.mp4", "NUM_GPUS", "0"]) == (["x.mp4"], ["NUM_GPUS", "0"])


def test_check_docs_accepts_a_predict_command():
    line = (
        f"python tools/predict.py --cfg {CFG} --checkpoint out/c.pyth v.mp4 w.mp4 "
        "--labels k400.csv --json --top 3 TEST.NUM_SPATIAL_CROPS 1"
    )
    command = check_docs.Command("doc.md", 1, shlex.split(line))
    assert check_docs.check(command, run=False) == "arguments and configs checked"
    bad = check_docs.Command("doc.md", 1, shlex.split(line + " TEST.NO_SUCH_KEY 1"))
    with pytest.raises(Exception, match="unknown config key TEST.NO_SUCH_KEY"):
        check_docs.check(bad, run=False)
