"""Tests of tools/dev/config_reference.py: docs/CONFIG_KEYS.md follows defaults.py."""

import os

import pytest

from slowfast.config.defaults import get_cfg
from tests.helpers.tool_utils import REPO_ROOT, load_tool

reference = load_tool("dev/config_reference.py")

PAGE = os.path.join(REPO_ROOT, "docs", "CONFIG_KEYS.md")


def _page() -> str:
    with open(PAGE) as f:
        return f.read()


def test_page_is_current():
    """Fails when defaults.py changed and the page was not regenerated."""
    assert reference.main(["--check"]) == 0, (
        "docs/CONFIG_KEYS.md is stale: run python tools/dev/config_reference.py"
    )


def test_generator_covers_every_key_with_its_value():
    sections = reference.parse_defaults()
    assert reference.check_coverage(sections) == []
    parsed = [key.name for section in sections for key in section.keys]
    assert sorted(parsed) == sorted(reference.leaf_keys(get_cfg()))
    assert all(key.description for section in sections for key in section.keys)


def test_page_has_one_row_per_key_in_the_files_order():
    sections = reference.parse_defaults()
    expected = [
        (f"`{key.name}`", f"`{key.default}`")
        for section in sections
        for key in section.keys
    ]
    rows = reference.table_rows(_page())
    assert [row[:2] for row in rows] == expected
    headings = [line[3:] for line in _page().splitlines() if line.startswith("## ")]
    assert headings == [section.name for section in sections]


def test_check_fails_on_a_stale_page(tmp_path, capsys):
    stale = tmp_path / "CONFIG_KEYS.md"
    stale.write_text(_page().replace("`BN.NUM_SPLITS` | `1`", "`BN.NUM_SPLITS` | `2`"))
    assert reference.main(["--check", "--output", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err
    # Without the reference's list the rows are still compared.
    missing = str(tmp_path / "no_such_list.txt")
    args = ["--check", "--output", str(stale), "--reference-keys", missing]
    assert reference.main(args) == 1
    assert "BN.NUM_SPLITS" in capsys.readouterr().err


def test_check_follows_a_changed_comment(tmp_path):
    with open(reference.DEFAULTS) as f:
        source = f.read()
    old = "# Number of classes to predict.\n"
    assert old in source
    changed = tmp_path / "defaults.py"
    changed.write_text(source.replace(old, "# Classes the head predicts.\n"))
    out = tmp_path / "page.md"
    assert reference.main(["--defaults", str(changed), "--output", str(out)]) == 0
    assert "| Classes the head predicts. |" in out.read_text()
    assert reference.main(["--check", "--output", str(out)]) == 1


def test_a_key_without_a_comment_stops_the_generator(tmp_path):
    path = tmp_path / "defaults.py"
    path.write_text(
        "_C = CfgNode()\n_C.A = CfgNode()\n# Described.\n_C.A.B = 1\n\n_C.A.C = 2\n"
    )
    with pytest.raises(SystemExit, match="A.C has no comment"):
        reference.parse_defaults(str(path))


def test_keys_under_one_comment_share_it(tmp_path):
    path = tmp_path / "defaults.py"
    path.write_text("# ---\n# Misc\n# ---\n# Group of two.\n_C.X = 0\n_C.Y = (1, 2)\n")
    (section,) = reference.parse_defaults(str(path))
    assert section.name == reference.TOP_LEVEL and section.title == "Misc"
    assert [(k.name, k.default, k.description) for k in section.keys] == [
        ("X", "0", "Group of two."),
        ("Y", "(1, 2)", "Group of two."),
    ]


def test_page_without_the_reference_list_says_so(tmp_path, capsys):
    missing = str(tmp_path / "no_such_list.txt")
    out = tmp_path / "page.md"
    assert reference.main(["--output", str(out), "--reference-keys", missing]) == 0
    assert "not found" in capsys.readouterr().err
    page = out.read_text()
    assert "was not found when this page was written" in page
    assert "in the reference's configs |" not in page
    # The committed page's rows match it, whether it has the column or not.
    assert reference.table_rows(page) == reference.table_rows(_page())
    assert reference.main(["--check", "--reference-keys", missing]) == 0


def test_reference_marks_and_differing_defaults(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# comment\nBN.NORM_TYPE = 'batchnorm'\nOUTPUT_DIR = '.'\n")
    page = reference.render(
        reference.parse_defaults(), reference.read_reference_keys(str(keys))
    )
    rows = {line.split(" | ")[0]: line for line in page.splitlines()}
    assert rows["| `BN.NORM_TYPE`"].endswith("| yes |")
    assert rows["| `OUTPUT_DIR`"].endswith("| yes (default `'.'`) |")
    assert rows["| `BN.NUM_SPLITS`"].endswith("| no |")
    assert "set 2 of them" in page
