"""The type check's baseline comparison (``tools/dev/check_types.py``)."""

from tests.helpers.tool_utils import load_tool

check_types = load_tool("dev/check_types.py")

OUTPUT = """\
slowfast/a.py:12: error: Item "None" of "X | None" has no attribute "y"  [union-attr]
slowfast/a.py:40: error: Item "None" of "X | None" has no attribute "y"  [union-attr]
slowfast/b.py:3: note: See https://mypy.readthedocs.io
slowfast/b.py:7: error: Incompatible return value type  [return-value]
"""


def test_normalize_drops_line_numbers_and_notes_and_counts_repeats():
    found = check_types.normalize(OUTPUT)
    assert found == {
        'slowfast/a.py: Item "None" of "X | None" has no attribute "y" [union-attr]': 2,
        "slowfast/b.py: Incompatible return value type [return-value]": 1,
    }


def _run(monkeypatch, tmp_path, output, baseline_lines, *args):
    baseline = tmp_path / "baseline.txt"
    baseline.write_text("".join(f"{line}\n" for line in baseline_lines))
    monkeypatch.setattr(check_types, "run_mypy", lambda: output)
    code = check_types.main(["--baseline", str(baseline), *args])
    return code, baseline.read_text().splitlines()


def test_a_new_error_fails_and_leaves_the_baseline(monkeypatch, tmp_path, capsys):
    known = ["slowfast/b.py: Incompatible return value type [return-value]"]
    code, after = _run(monkeypatch, tmp_path, OUTPUT, known, "--update")
    assert code == 1
    assert after == known
    assert "2 type error(s) not in" in capsys.readouterr().out


def test_fixed_errors_pass_and_update_shrinks_the_baseline(monkeypatch, tmp_path):
    entries = sorted(check_types.normalize(OUTPUT).elements())
    extra = "slowfast/c.py: Name 'z' is not defined [name-defined]"
    code, after = _run(monkeypatch, tmp_path, OUTPUT, entries + [extra])
    assert code == 0 and after == entries + [extra]
    code, after = _run(monkeypatch, tmp_path, OUTPUT, entries + [extra], "--update")
    assert code == 0 and after == entries


def test_the_recorded_baseline_is_sorted_and_normalized():
    with open(check_types.BASELINE) as f:
        lines = [line.rstrip("\n") for line in f]
    assert lines == sorted(lines)
    assert all(line.startswith("slowfast/") and line.endswith("]") for line in lines)
