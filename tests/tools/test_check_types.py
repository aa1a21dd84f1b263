"""The type check (``tools/dev/check_types.py``): mypy, and no known errors."""

import os

import pytest

from tests.helpers.tool_utils import load_tool

check_types = load_tool("dev/check_types.py")


def test_it_checks_the_package_the_workshop_the_tools_and_the_projects():
    assert check_types.PATHS == ("slowfast", "workshop", "tools", "projects")
    baseline = os.path.join(check_types.REPO_ROOT, "tools", "dev", "mypy_baseline.txt")
    assert not os.path.exists(baseline), "the check keeps no list of known errors"


def test_a_type_error_fails_the_check_with_mypys_report(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("def half(x: int) -> int:\n    return x / 2\n")
    assert check_types.main([str(bad)]) == 1
    out = capsys.readouterr().out
    assert "bad.py:2: error: Incompatible return value type" in out
    assert "[return-value]" in out and "Found 1 error" in out


def test_a_well_typed_file_passes(tmp_path, capsys):
    good = tmp_path / "good.py"
    good.write_text("def half(x: int) -> float:\n    return x / 2\n")
    assert check_types.main([str(good)]) == 0
    assert "Success: no issues found in 1 source file" in capsys.readouterr().out


@pytest.mark.slow
def test_the_repository_passes(capsys):
    assert check_types.main([]) == 0, capsys.readouterr().out
