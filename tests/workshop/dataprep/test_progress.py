"""The preparation tools' progress line: rewritten in place on a terminal, a
line per tenth of the work in a log."""

import io

from workshop.dataprep.prepare import common
from workshop.dataprep.prepare.common import ProgressLine, run_items


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _BareStream:
    """A stream with ``write`` and ``flush`` only."""

    def __init__(self):
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


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


def test_log_line_only_once_the_interval_has_passed(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(common.time, "monotonic", lambda: now[0])
    log = io.StringIO()
    progress = ProgressLine(log, "work", total=1000, interval_s=60.0)
    now[0] = 159.0
    progress.update(1, 0)  # not a tenth, under a minute: held back
    assert log.getvalue() == ""
    now[0] = 161.0
    progress.update(2, 0)
    assert log.getvalue() == "work: 2/1000 (0 failed), 61 s, about 30439 s left\n"
    now[0] = 200.0
    progress.update(3, 0)  # a minute since the last line has not passed
    progress.close()
    assert log.getvalue().count("\n") == 1


def test_stream_without_isatty_and_no_items():
    bare = _BareStream()
    results, failures = run_items([], _square, workers=0, label="work", stream=bare)
    assert (results, failures) == ([], [])
    assert bare.text == ""
    results, _ = run_items([("a", 4)], _square, workers=0, label="work", stream=bare)
    assert results == [16]
    assert bare.text.startswith("work: 1/1 (0 failed), ") and bare.text.endswith("\n")
