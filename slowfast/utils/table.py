"""Aligned plain-text tables for the command-line tools' reports."""

from typing import Any, Sequence


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], float_fmt: str = ".1f"
) -> str:
    """Returns a text table: header, a dashed rule, then one line per row.

    Columns whose cells are all numbers (or empty) are right-aligned, the
    others left-aligned; short rows are padded with empty cells.

    Args:
        headers: column titles.
        rows: cell values; floats are written with ``float_fmt``, anything
            else with ``str``.
        float_fmt: format spec of float cells.

    Returns:
        str: the table, lines joined by newlines, no trailing spaces.
    """
    body = [
        [format(v, float_fmt) if isinstance(v, float) else str(v) for v in row]
        + [""] * (len(headers) - len(row))
        for row in rows
    ]
    cells = [[str(h) for h in headers]] + body
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        all(_is_number(row[i]) for row in body if row[i]) for i in range(len(widths))
    ]
    lines = [
        "  ".join(
            c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric)
        ).rstrip()
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
