#!/usr/bin/env python3
"""Writes the config-key reference (docs/CONFIG_KEYS.md) from the defaults.

Usage:
    python tools/dev/config_reference.py            # (re)write docs/CONFIG_KEYS.md
    python tools/dev/config_reference.py --check    # exit 1 when it is stale

Every key of ``slowfast/config/defaults.py`` gets a row: its default (the
expression the file assigns) and its description (the comment lines right
above the assignment), in one table per top-level node, in the file's order.
A key without a comment, or a key of ``get_cfg()`` the file does not assign
where this tool can read it, stops the tool with one line naming the key.

The reference column marks the keys that the reference implementation's
(PySlowFast) published configs set, from ``../shared/reference/config_keys.txt``
beside the checkout (``KEY = value`` lines), with the reference's default where
it differs from ours. Without that file the page is written without the column
and says so; ``--check`` then compares keys, defaults and descriptions only.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULTS = os.path.join(ROOT, "slowfast", "config", "defaults.py")
OUTPUT = os.path.join(ROOT, "docs", "CONFIG_KEYS.md")
REFERENCE_KEYS = os.path.join(
    os.path.dirname(ROOT), "shared", "reference", "config_keys.txt"
)
# How the page names the reference list (it lies outside the repository).
REFERENCE_KEYS_NAME = "../shared/reference/config_keys.txt"
TOP_LEVEL = "Top-level keys"
RULE = re.compile(r"^#\s*-{3,}")
CELL_SPLIT = re.compile(r"(?<!\\)\|")

HEADER = """# Config keys

Every key of the config tree: its default and what it does, one table per
top-level node in the order of `slowfast/config/defaults.py`, whose comments
are the descriptions. A YAML file under `configs/` or a `KEY VALUE` override on
the command line sets any of them ([docs/guide/configs.md, "The command
line"](guide/configs.md#the-command-line)); an unknown key or a value of the wrong type
stops the run with one line naming it. Defaults are written as `defaults.py`
writes them (Python literals). The words these descriptions use without
defining them: [GLOSSARY.md](GLOSSARY.md).

This page is written by `python tools/dev/config_reference.py` from
`slowfast/config/defaults.py`; do not edit it by hand.
`python tools/dev/config_reference.py --check` and
`tests/tools/test_config_reference.py` fail when it is stale.
"""

LEGEND = f"""The **in the reference's configs** column says whether the reference
implementation's (PySlowFast's) published configs in scope set the key: *yes*
(with the reference's default where it differs from ours) or *no*. A *no* key
is either ours or a PySlowFast key that those configs leave at its default.
The list, with the reference's defaults, is `{REFERENCE_KEYS_NAME}`
beside the checkout.
"""

NO_LEGEND = f"""The reference implementation's key list (`{REFERENCE_KEYS_NAME}`,
beside the checkout) was not found when this page was written: no key is
marked as one that the reference's published configs set.
"""


@dataclass
class Key:
    """One config key as ``defaults.py`` assigns it.

    Attributes:
        name: the dotted key, e.g. ``TRAIN.BATCH_SIZE``.
        default: the assigned expression, as source text.
        description: the comment lines above the assignment, joined.
        line: the assignment's line in ``defaults.py`` (1-based).
    """

    name: str
    default: str
    description: str
    line: int


@dataclass
class Section:
    """A top-level node of the config (or the top-level keys).

    Attributes:
        name: the node's name (``BN``), or ``TOP_LEVEL`` for the top-level keys.
        title: the banner comment above it in ``defaults.py``
            (``Batch norm options``).
        keys: its keys, in the file's order.
    """

    name: str
    title: str
    keys: List[Key]


def _dotted(node: ast.expr) -> Optional[str]:
    """``BN.NORM_TYPE`` for the target ``_C.BN.NORM_TYPE``; None for others."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "_C" and parts:
        return ".".join(reversed(parts))
    return None


def _is_node(value: ast.expr) -> bool:
    """Whether ``value`` is a ``CfgNode()`` call (a new node, not a key)."""
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "CfgNode"
    )


def _comment_above(lines: List[str], line: int) -> List[str]:
    """The comment lines right above ``line`` (1-based), banners excluded."""
    found: List[str] = []
    index = line - 2
    while index >= 0:
        text = lines[index].strip()
        if not text.startswith("#") or RULE.match(text):
            break
        found.append(text[1:].strip())
        index -= 1
    return list(reversed(found))


def _banners(lines: List[str]) -> List[tuple]:
    """``(line, title)`` of every banner: a title between two ``# ---`` rules."""
    banners = []
    index = 0
    while index < len(lines):
        if not RULE.match(lines[index].strip()):
            index += 1
            continue
        title, end = [], index + 1
        while end < len(lines) and lines[end].strip().startswith("#"):
            if RULE.match(lines[end].strip()):
                break
            title.append(lines[end].strip()[1:].strip())
            end += 1
        closed = end < len(lines) and RULE.match(lines[end].strip())
        if title and closed:
            banners.append((index + 1, " ".join(title)))
            index = end + 1  # past the closing rule
        else:
            index = end
    return banners


def parse_defaults(path: str = DEFAULTS) -> List[Section]:
    """The keys that ``path`` assigns, grouped by top-level node.

    Args:
        path: the defaults file (``slowfast/config/defaults.py``).

    Returns:
        The sections in the file's order; the top-level keys form one section.

    Raises:
        SystemExit: a key has no comment above it.
    """
    with open(path) as f:
        source = f.read()
    lines = source.splitlines()
    banners = _banners(lines)
    sections: Dict[str, Section] = {}

    def banner_before(line: int) -> str:
        titles = [title for start, title in banners if start < line]
        return titles[-1] if titles else ""

    previous = None  # the last key's statement and comment
    for statement in ast.parse(source).body:
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            continue
        name = _dotted(statement.targets[0])
        if name is None:
            continue
        if _is_node(statement.value):
            sections[name] = Section(name, banner_before(statement.lineno), [])
            continue
        node = name.split(".")[0] if "." in name else TOP_LEVEL
        if node not in sections:  # the top-level keys, under their own banner
            sections[node] = Section(node, banner_before(statement.lineno), [])
        comment = _comment_above(lines, statement.lineno)
        if not comment and previous and previous[0].end_lineno == statement.lineno - 1:
            comment = previous[1]  # a group of keys under one comment
        previous = (statement, comment)
        if not comment:
            raise SystemExit(
                f"{os.path.relpath(path, ROOT)}:{statement.lineno}: {name} has no "
                "comment above it: describe the key there"
            )
        default = " ".join(ast.unparse(statement.value).split())
        sections[node].keys.append(
            Key(name, default, " ".join(comment), statement.lineno)
        )
    return [section for section in sections.values() if section.keys]


def leaf_keys(cfg) -> Dict[str, object]:
    """Every leaf key of a CfgNode with its value, dotted (``BN.NORM_TYPE``)."""
    out: Dict[str, object] = {}
    for name, value in cfg.items():
        if hasattr(value, "items"):
            out.update({f"{name}.{k}": v for k, v in leaf_keys(value).items()})
        else:
            out[name] = value
    return out


def check_coverage(sections: List[Section]) -> List[str]:
    """Differences between the parsed keys and ``get_cfg()``: one line each.

    Every leaf key of the config must be parsed once, and its default
    expression must evaluate to the config's value.

    Args:
        sections: what ``parse_defaults`` read from ``slowfast/config/defaults.py``.

    Returns:
        The problems, empty when the parsed keys are exactly the config's.
    """
    from slowfast.config.defaults import get_cfg

    values = leaf_keys(get_cfg())
    problems = []
    parsed: Dict[str, Key] = {}
    for key in (key for section in sections for key in section.keys):
        if key.name in parsed:
            problems.append(f"{key.name}: assigned again at line {key.line}")
        parsed[key.name] = key
    for name in sorted(set(values) - set(parsed)):
        problems.append(f"{name}: in get_cfg() but not read from defaults.py")
    for name in sorted(set(parsed) - set(values)):
        problems.append(f"{name}: read from defaults.py but not in get_cfg()")
    for name in sorted(set(parsed) & set(values)):
        try:
            value = eval(parsed[name].default, {"__builtins__": {}})
        except Exception as err:  # an expression this page cannot show as a value
            problems.append(f"{name}: default {parsed[name].default} ({err})")
            continue
        if value != values[name]:
            problems.append(
                f"{name}: default {parsed[name].default} is not {values[name]!r}"
            )
    return problems


def read_reference_keys(path: str = REFERENCE_KEYS) -> Optional[Dict[str, str]]:
    """The reference's keys with their defaults (source text), or None.

    Args:
        path: a file of ``KEY = value`` lines (``#`` starts a comment line).

    Returns:
        ``{key: default}``, or None when ``path`` does not exist.
    """
    if not os.path.isfile(path):
        return None
    keys = {}
    with open(path) as f:
        for text in f:
            text = text.strip()
            if not text or text.startswith("#"):
                continue
            name, sep, value = text.partition("=")
            if not sep:
                raise SystemExit(f"{path}: not a KEY = value line: {text}")
            keys[name.strip()] = value.strip()
    return keys


def _same_default(ours: str, theirs: str) -> bool:
    """Whether our default expression and the reference's value are equal."""
    try:
        return eval(ours, {"__builtins__": {}}) == ast.literal_eval(theirs)
    except (ValueError, SyntaxError, TypeError, NameError):
        return " ".join(ours.split()) == " ".join(theirs.split())


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell (no column breaks, no HTML tags)."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def _code(text: str) -> str:
    """``text`` as inline code in a table cell."""
    return "`" + text.replace("|", "\\|") + "`"


def _reference_cell(key: Key, reference: Dict[str, str]) -> str:
    """The reference column of ``key``'s row: yes (with a differing default) or no."""
    if key.name not in reference:
        return "no"
    theirs = reference[key.name]
    if _same_default(key.default, theirs):
        return "yes"
    return f"yes (default {_code(theirs)})"


def render(sections: List[Section], reference: Optional[Dict[str, str]]) -> str:
    """The whole page.

    Args:
        sections: the parsed keys (``parse_defaults``).
        reference: the reference's keys (``read_reference_keys``), or None to
            write the page without the reference column.

    Returns:
        The Markdown text of docs/CONFIG_KEYS.md.
    """
    total = sum(len(section.keys) for section in sections)
    parts = [HEADER.rstrip("\n") + "\n"]
    if reference is None:
        parts.append(NO_LEGEND)
    else:
        ours = {key.name for section in sections for key in section.keys}
        marked = len(ours & set(reference))
        parts.append(LEGEND)
        parts.append(
            f"{total} keys; the reference's published configs set {marked} of them.\n"
        )
        missing = sorted(set(reference) - ours)
        if missing:
            parts.append(
                "Keys of the reference's list that this config does not have: "
                + ", ".join(_code(name) for name in missing)
                + ".\n"
            )
    links = " · ".join(
        f"[{section.name}](#{_anchor(section.name)})" for section in sections
    )
    parts.append(f"Sections: {links}\n")
    headers = ["key", "default", "description"]
    if reference is not None:
        headers.append("in the reference's configs")
    for section in sections:
        parts.append(f"## {section.name}\n")
        if section.title:
            parts.append(f"{section.title.rstrip('.')}.\n")
        rows = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
        for key in section.keys:
            cells = [_code(key.name), _code(key.default), _cell(key.description)]
            if reference is not None:
                cells.append(_reference_cell(key, reference))
            rows.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading (as ``tools/dev/check_docs.py`` computes it)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def table_rows(page: str) -> List[tuple]:
    """``(key, default, description)`` of every key row of a rendered page."""
    rows = []
    for line in page.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [cell.strip() for cell in CELL_SPLIT.split(line)[1:-1]]
        rows.append(tuple(cells[:3]))
    return rows


def stale(
    page: str, current: str, reference: Optional[Dict[str, str]]
) -> Optional[str]:
    """Why ``current`` (the page on disk) differs from ``page``, or None.

    With the reference's list the pages must be equal; without it only the
    keys, defaults and descriptions are compared.
    """
    if reference is not None:
        return None if current == page else "differs from the generated page"
    ours, theirs = table_rows(page), table_rows(current)
    if ours == theirs:
        return None
    for new, old in zip(ours, theirs):
        if new != old:
            return f"row {old[0]} should be {' | '.join(new)}"
    return f"{len(theirs)} key rows where defaults.py has {len(ours)}"


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parses the command line (``--check``, ``--output``, ``--reference-keys``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the page is stale"
    )
    parser.add_argument(
        "--output", default=OUTPUT, help="the page (default: docs/CONFIG_KEYS.md)"
    )
    parser.add_argument(
        "--defaults", default=DEFAULTS, help="the defaults file (default: ours)"
    )
    parser.add_argument(
        "--reference-keys",
        default=REFERENCE_KEYS,
        help=f"the reference's keys (default: {REFERENCE_KEYS_NAME})",
    )
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Writes the page, or with ``--check`` compares it with the one on disk.

    Args:
        argv: the command line without the program (default: ``sys.argv[1:]``).

    Returns:
        0 when written or current; 1 when stale or a key is not covered.
    """
    args = parse_args(argv)
    sections = parse_defaults(args.defaults)
    if os.path.abspath(args.defaults) == os.path.abspath(DEFAULTS):
        problems = check_coverage(sections)
        if problems:
            for problem in problems:
                print(f"{DEFAULTS}: {problem}", file=sys.stderr)
            return 1
    reference = read_reference_keys(args.reference_keys)
    if reference is None:
        print(
            f"{args.reference_keys} not found: the page has no reference column",
            file=sys.stderr,
        )
    page = render(sections, reference)
    if args.check:
        current = ""
        if os.path.isfile(args.output):
            with open(args.output) as f:
                current = f.read()
        why = stale(page, current, reference)
        if why:
            print(
                f"{args.output} is stale ({why}): run "
                "python tools/dev/config_reference.py",
                file=sys.stderr,
            )
            return 1
        print(f"{args.output} is up to date")
        return 0
    with open(args.output, "w") as f:
        f.write(page)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
