"""Tests of the text tables printed by the tools."""

from slowfast.utils.table import format_table


def test_numeric_columns_right_text_columns_left_short_rows_padded():
    text = format_table(["a", "bb", "c"], [[1.25, "x", 3], ["long"], [2.0, "yy", 10]])
    assert text.splitlines() == [
        "a     bb   c",
        "----  --  --",
        "1.2   x    3",
        "long",
        "2.0   yy  10",
    ]


def test_all_numeric_column_is_right_aligned_with_float_format():
    text = format_table(["value"], [[0.5], [12.25]], float_fmt=".2f")
    assert text.splitlines() == ["value", "-----", " 0.50", "12.25"]
