"""The preparation tools' progress line: rewritten in place on a terminal, a
line per tenth of the work in a log."""

import io

from slowfast.dataprep.prepare.common import ProgressLine, run_items


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _square(item):
    if item[0] == "bad":
        raise ValueError("unreadable video\nsecond line")
    return item[1] ** 2


def test_log_gets_a_line_per_tenth_of_the_work():
    log = io.StringIO()
    items = [(f"v{i}", i) for i in range(25)]
    results, failures = run_items(items, _square, workers=0, label="work", stream=log)
    assert results == [i**2 for i in range(25)]
    assert failures == []
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    # Steps of 3 items (a tenth of 25, rounded up) and the last item.
    assert [line.split(":")[1].split()[0] for line in lines] == [
        f"{n}/25" for n in (3, 6, 9, 12, 15, 18, 21, 24, 25)
    ]
    assert lines[-1].startswith("work: 25/25 (0 failed), ")


def test_terminal_line_is_rewritten_after_every_item():
    term = _Terminal()
    items = [("a", 1), ("bad", 2), ("c", 3)]
    results, failures = run_items(items, _square, workers=0, label="work", stream=term)
    assert results == [1, None, 9]
    assert failures == [("bad", "ValueError: unreadable video")]
    text = term.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n")
    assert "work: 3/3 (1 failed)" in text.split("\r")[-1]


def test_log_line_once_the_interval_has_passed():
    log = io.StringIO()
    progress = ProgressLine(log, "work", total=1000, interval_s=0.0)
    progress.update(1, 0)
    progress.close()
    assert log.getvalue().startswith("work: 1/1000 (0 failed), ")
    assert log.getvalue().count("\n") == 1
