"""``projects/multigrid/tables.py``: headline rows from kept results, and the
documents' generated parts up to date with them."""

import pytest
from multigrid_study.headline import (
    difference_text,
    headline_row,
    machine_words,
    seeds_text,
    signed,
    subset_range,
)

from tests.helpers.tool_utils import load_tool_path

MACHINE = {"cpu": "AMD EPYC", "cpus": 2, "gpu": None, "gpus": None, "torch": "2"}


def _run(arm, seed, top1, train_s, correct="", **extra):
    return dict(
        arm=arm, budget=1.0, seed=seed, test_top1=top1, train_s=train_s,
        test_videos=4, machine=dict(MACHINE), correct=correct, **extra,
    )  # fmt: skip


def test_a_row_pairs_seeds_and_times_only_undisturbed_pairs():
    base = [_run("baseline", s, 90.0 + s, 100.0) for s in (0, 1, 2)]
    base[1]["timing_disturbed"] = "another job ran beside it"
    multi = [_run("long_short", s, 91.0 + s, 40.0) for s in (0, 1, 3)]
    row = headline_row(base, multi)
    assert row.seeds == [0, 1] and row.timing_seeds == [0]
    assert row.baseline_top1 == 90.5 and row.multigrid_top1 == 91.5
    assert row.difference == pytest.approx(1.0)
    assert row.interval == pytest.approx((1.0, 1.0))  # equal differences
    assert row.speedup == pytest.approx(2.5)
    assert seeds_text(row) == "2 (wall-clock: seeds 0)"
    assert difference_text(row) == "+1.0 [+1.0, +1.0]"


def test_a_row_refuses_unpaired_or_mixed_runs():
    base = [_run("baseline", 0, 90.0, 100.0)]
    with pytest.raises(ValueError, match="no seed has both"):
        headline_row(base, [_run("long_short", 1, 90.0, 10.0)])
    other = _run("long_short", 0, 90.0, 10.0)
    other["test_videos"] = 5
    with pytest.raises(ValueError, match="tested on"):
        headline_row(base, [other])
    other = _run("long_short", 0, 90.0, 10.0)
    other["machine"]["cpus"] = 16
    with pytest.raises(ValueError, match="several machines"):
        headline_row(base, [other])


def test_machine_words_name_the_cpu_without_trademark_signs():
    xeon = dict(MACHINE, cpu="Intel(R) Xeon(R) Processor", cpu_id="family 6 model 167")
    assert machine_words(xeon) == "2-core Intel Xeon Processor (family 6 model 167)"
    assert machine_words(MACHINE) == "2-core AMD EPYC"


def test_signed_numbers_and_first_videos():
    assert [signed(v) for v in (0.26, -1.34, -0.04, 0.0)] == [
        "+0.3", "-1.3", "0.0", "0.0",
    ]  # fmt: skip
    runs = [{"correct": "1101"}, {"correct": "1111"}]
    assert subset_range(runs, 2) == (100.0, 100.0)
    assert subset_range(runs, 4) == (75.0, 100.0)
    assert subset_range(runs, 5) is None


def test_the_documents_match_the_kept_results():
    tables = load_tool_path("projects/multigrid/tables.py")
    assert tables.main(["--check"]) == 0, "run python projects/multigrid/tables.py"
