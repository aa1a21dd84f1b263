"""Class names from the label files users have (``tools/predict.py --labels``).

Three formats, told apart by their content:

* JSON: a ``{name: id}`` mapping (PySlowFast's ``kinetics_classnames.json``;
  ids may be strings, as in SSv2's labels JSON), an ``{id: name}`` mapping,
  or a list of names in class order;
* CSV: ``id,name`` rows, with or without a header row (``id,name``);
* text: one name per line, in class order.

Blank lines are ignored, and a name wrapped in double quotes (as some
``kinetics_classnames.json`` keys are) loses them. The ids must be exactly
``0 .. K-1``.
"""

import csv
import json
from typing import Dict, List, Optional

from slowfast.datasets.lists import DataError


def _clean(name: str) -> str:
    name = name.strip()
    if len(name) >= 2 and name[0] == name[-1] == '"':
        name = name[1:-1].strip()
    return name


def _as_id(text: str) -> Optional[int]:
    text = str(text).strip()
    return int(text) if text.isdigit() else None


def _names_by_id(path: str, by_id: Dict[int, str]) -> List[str]:
    """The names in id order; one line when ids are not exactly 0 .. K-1."""
    missing = [i for i in range(len(by_id)) if i not in by_id]
    if missing:
        raise DataError(
            f"{path}: class ids must be 0 .. {len(by_id) - 1}, but {missing[0]} is "
            "missing; give one name per class id"
        )
    return [by_id[i] for i in range(len(by_id))]


def _add(path: str, by_id: Dict[int, str], class_id: Optional[int], name) -> None:
    if class_id is None or not isinstance(name, str) or not _clean(name):
        raise DataError(
            f"{path}: expected class names with integer ids, got {name!r} -> "
            f"{class_id!r}; see tools/predict.py --help for the label formats"
        )
    if class_id in by_id:
        raise DataError(
            f"{path}: class id {class_id} is given twice ({by_id[class_id]!r} and "
            f"{_clean(name)!r}); give one name per class id"
        )
    by_id[class_id] = _clean(name)


def _from_json(path: str, data) -> List[str]:
    if isinstance(data, list):
        by_id: Dict[int, str] = {}
        for class_id, name in enumerate(data):
            _add(path, by_id, class_id, name)
        return _names_by_id(path, by_id)
    if not isinstance(data, dict):
        raise DataError(
            f"{path}: expected a JSON object {{name: id}} or a list of names, got "
            f"a {type(data).__name__}"
        )
    by_id = {}
    if data and all(_as_id(key) is not None for key in data):  # {id: name}
        for key, name in data.items():
            _add(path, by_id, _as_id(key), name)
    else:  # {name: id}, ids as numbers or strings (SSv2's labels JSON)
        for name, class_id in data.items():
            number = _as_id(class_id) if type(class_id) in (int, str) else None
            _add(path, by_id, number, name)
    return _names_by_id(path, by_id)


def _from_text(path: str, lines: List[str]) -> List[str]:
    rows = list(csv.reader(lines))
    body = rows[1:] if rows and _as_id(rows[0][0]) is None else rows
    if body and all(len(row) >= 2 and _as_id(row[0]) is not None for row in body):
        by_id: Dict[int, str] = {}
        for row in body:  # a name holding commas was split: join it back
            _add(path, by_id, _as_id(row[0]), ",".join(row[1:]))
        return _names_by_id(path, by_id)
    return [_clean(line) for line in lines]


def read_class_names(path: str) -> List[str]:
    """Reads a label file (see the module docstring for the formats).

    Args:
        path: the label file.

    Returns:
        list[str]: the class names, index = class id.

    Raises:
        DataError: the file is missing, unreadable, empty or malformed (one
            line naming it).
    """
    try:
        with open(path, encoding="utf-8-sig") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise DataError(f"{path}: cannot read the label file ({reason})") from err
    if text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}: not valid JSON ({err})") from err
        names = _from_json(path, data)
    else:
        names = _from_text(path, [line for line in text.splitlines() if line.strip()])
    if not names:
        raise DataError(f"{path}: the label file holds no class names")
    return names


def check_class_count(path: str, names: List[str], num_classes: int) -> None:
    """Raises one line when a label file does not name every class of the model.

    Args:
        path: the label file (for the message).
        names: its class names.
        num_classes: MODEL.NUM_CLASSES.

    Raises:
        DataError: the counts differ.
    """
    if len(names) != num_classes:
        raise DataError(
            f"{path}: {len(names)} class names, but the model has {num_classes} "
            "classes (MODEL.NUM_CLASSES); give the label file of the dataset the "
            "checkpoint was trained on"
        )
