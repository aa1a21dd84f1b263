"""Tests of tools/verify_dataset.py on clean data and on each planted fault."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.tool_utils import REPO_ROOT, load_tool, tool_path
from tests.helpers.video_utils import (
    make_charades,
    make_kinetics,
    make_ssv2,
    write_kinetics_list,
    write_video,
)

TOOL = tool_path("verify_dataset.py")
BASE_OPTS = [
    "MODEL.NUM_CLASSES", "3", "DATA.NUM_FRAMES", "4", "DATA.SAMPLING_RATE", "2",
]  # fmt: skip


@pytest.fixture(scope="module")
def tool():
    return load_tool("verify_dataset.py")


def _run(tool, capsys, root, dataset="kinetics", *flags, opts=()):
    paths = ["TRAIN.DATASET", dataset, "TEST.DATASET", dataset,
             "DATA.PATH_TO_DATA_DIR", root, "DATA.PATH_PREFIX", root]  # fmt: skip
    code = tool.main(list(flags) + BASE_OPTS + paths + list(opts))
    return code, capsys.readouterr().out


@pytest.fixture
def kinetics_root(tmp_path):
    return make_kinetics(str(tmp_path), [("a.mp4", 20, 0), ("b.mp4", 16, 2)])


def test_clean_kinetics_exits_zero(tool, capsys, kinetics_root):
    code, out = _run(tool, capsys, kinetics_root)
    assert code == 0, out
    assert "OK: 0 bad of 6 entries in 3 split(s)" in out
    assert "BAD" not in out


def test_kinetics_planted_faults(tool, capsys, kinetics_root):
    root = kinetics_root
    write_video(os.path.join(root, "short.mp4"), 5)
    with open(os.path.join(root, "garbage.mp4"), "wb") as f:
        # Fixed bytes: random ones opened as a video-less file 1% of the time.
        f.write(b"not a video file\n" * 120)
    rows = [("a.mp4", 0), ("missing.mp4", 1), ("garbage.mp4", 1), ("short.mp4", 1),
            ("b.mp4", 7)]  # fmt: skip
    write_kinetics_list(os.path.join(root, "train.csv"), rows)
    with open(os.path.join(root, "val.csv"), "a") as f:
        f.write("broken line here\n")
    code, out = _run(tool, capsys, root, "kinetics", "--split", "all")
    assert code == 1
    bad = [line for line in out.splitlines() if line.startswith("BAD")]
    expect = {
        "missing.mp4: file not found",
        "garbage.mp4: cannot open",
        "short.mp4: too short: 5 frames < clip span 8",
        "b.mp4: label 7 outside 0..2",
        "val.csv:3: expected 'path label'",
    }
    for fragment in expect:
        assert sum(fragment in line for line in bad) == 1, (fragment, out)
    assert len(bad) == len(expect)
    code, out = _run(tool, capsys, root, "kinetics", "--split", "val")
    assert code == 1 and "FAILED: 1 bad of 3 entries in 1 split(s)" in out
    code, out = _run(tool, capsys, root, "kinetics", "--split", "test")
    assert code == 0


def test_allow_short_and_truncated(tool, capsys, tmp_path):
    from tests.helpers.video_utils import write_truncated_video

    root = make_kinetics(str(tmp_path), [("short.mp4", 5, 0)])
    code, out = _run(tool, capsys, root, "kinetics", "--allow-short")
    assert code == 0 and "WARNING [train]" in out and "too short" in out
    write_truncated_video(os.path.join(root, "short.mp4"), 60, keep=40)
    code, out = _run(tool, capsys, root, "kinetics", "--split", "train")
    assert code == 1 and "truncated: 40 frames decoded" in out


def test_ssv2_faults(tool, capsys, tmp_path):
    root = make_ssv2(str(tmp_path), {"1": 6, "2": 6, "3": 2})
    code, out = _run(tool, capsys, root, "ssv2", "--split", "train")
    assert code == 1
    assert "too short: 2 frames < clip span 4" in out
    # Unknown template, a video without frames and a missing frame file.
    path = os.path.join(root, "something-something-v2-train.json")
    entries = json.load(open(path))
    entries[0]["template"] = "Juggling [something]"
    entries.append({"id": "99", "template": entries[1]["template"]})
    json.dump(entries, open(path, "w"))
    os.remove(os.path.join(root, "frames", "2", "000003.jpg"))
    code, out = _run(tool, capsys, root, "ssv2", "--split", "train")
    assert code == 1
    assert "template not in something-something-v2-labels.json" in out
    assert "video 99: no frames listed" in out
    assert "1 of 6 frames missing" in out
    opts = ("DATA.NUM_FRAMES", "2")
    code, out = _run(tool, capsys, root, "ssv2", "--split", "val", opts=opts)
    assert code == 1 and "FAILED: 1 bad of 3 entries" in out, out
    assert "video 2: 1 of 6 frames missing" in out


def test_charades_faults(tool, capsys, tmp_path):
    def labels(video, frame):
        return "5" if (video, frame) == ("x", 2) else "0,1"

    root = make_charades(str(tmp_path), {"x": 8, "y": 8}, labels)
    code, out = _run(tool, capsys, root, "charades", "--split", "val")
    assert code == 1
    assert "video x: label 5 outside 0..2" in out
    with open(os.path.join(root, "frames", "y", "000004.jpg"), "wb") as f:
        f.write(b"not a jpeg")
    code, out = _run(tool, capsys, root, "charades", "--split", "train", "--full")
    assert "cannot decode image" in out and code == 1


@pytest.mark.slow
def test_cli_exit_codes(tool, capsys, kinetics_root):
    args = ["--split", "train"] + BASE_OPTS
    args += ["DATA.PATH_TO_DATA_DIR", kinetics_root, "DATA.PATH_PREFIX", kinetics_root]
    assert tool.main(args + ["DATA.NO_SUCH_KEY", "1"]) == 2
    assert "NO_SUCH_KEY" in capsys.readouterr().err
    os.remove(os.path.join(kinetics_root, "a.mp4"))
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    bad = subprocess.run(
        [sys.executable, TOOL] + args, capture_output=True, text=True, env=env
    )
    assert bad.returncode == 1 and "a.mp4: file not found" in bad.stdout


def test_option_after_overrides_is_one_clear_line(tool, capsys):
    with pytest.raises(SystemExit) as exit_info:
        tool.main(["DATA.NUM_FRAMES", "4", "--split", "train"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "option --split must come before the KEY VALUE overrides" in err


@pytest.fixture
def registered():
    """Registers dataset classes for one test, then removes them."""
    from slowfast.datasets import DATASET_REGISTRY

    names = []

    def register(cls):
        DATASET_REGISTRY.register(cls)
        names.append(cls.__name__)
        return cls

    yield register
    for name in names:
        DATASET_REGISTRY._obj_map.pop(name)


def test_a_registered_dataset_is_verified_through_its_own_lists(
    registered, kinetics_root
):
    from slowfast.config import load_config
    from slowfast.datasets.base import VideoDataset
    from slowfast.datasets.kinetics import Kinetics
    from workshop.dataprep.verify import default_splits, verify_split

    @registered
    class MyClips(Kinetics):  # a user's dataset in the Kinetics format
        pass

    @registered
    class NoLists(VideoDataset):
        pass

    def cfg(name):
        return load_config(
            [], BASE_OPTS + ["TRAIN.DATASET", name, "TEST.DATASET", name,
                             "DATA.PATH_TO_DATA_DIR", kinetics_root,
                             "DATA.PATH_PREFIX", kinetics_root],
        )  # fmt: skip

    report = verify_split(cfg("myclips"), "train")
    assert (report.dataset, report.entries, report.problems) == ("myclips", 2, [])
    assert report.source == os.path.join(kinetics_root, "train.csv")
    assert default_splits(cfg("myclips")) == ["train", "val", "test"]
    assert default_splits(cfg("ssv2")) == ["train", "val"]  # tests on val's files
    report = verify_split(cfg("NoLists"), "train")
    assert [p.reason for p in report.problems] == [
        "NoLists defines no lists_to_verify(); the verifier cannot check it"
    ]


def test_a_list_that_cannot_be_read_is_one_problem_at_its_file(tmp_path):
    from slowfast.config import load_config
    from workshop.dataprep.verify import verify_split

    ssv2 = make_ssv2(str(tmp_path / "ssv2"), {"1": 6})
    os.remove(os.path.join(ssv2, "something-something-v2-labels.json"))
    empty = str(tmp_path / "empty")
    os.makedirs(empty)
    for dataset, root, source, missing in [
        ("ssv2", ssv2, "train.csv", "something-something-v2-labels.json"),
        ("kinetics", empty, "train.csv", "train.csv"),
    ]:
        opts = ["TRAIN.DATASET", dataset, "DATA.PATH_TO_DATA_DIR", root]
        report = verify_split(load_config([], BASE_OPTS + opts), "train")
        assert report.source == os.path.join(root, source)
        assert [p.path for p in report.problems] == [report.source]
        assert missing in report.problems[0].reason, report.problems
