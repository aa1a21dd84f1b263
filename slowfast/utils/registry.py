"""Checking a config value against the names a registry holds."""

import difflib
from typing import Iterable


def check_registered(key: str, value: str, names: Iterable[str], fold_case=False):
    """Raises a one-line ValueError unless ``value`` is one of ``names``.

    Args:
        key: the config key (named in the message).
        value: its value.
        names: the registered names.
        fold_case: compare lower-cased (the dataset lookup ignores case).

    Raises:
        ValueError: ``KEY = 'value': must be one of [...] (did you mean X?)``.
    """
    names = sorted(n.lower() if fold_case else n for n in names)
    probe = str(value).lower() if fold_case else value
    if probe in names:
        return
    close = difflib.get_close_matches(str(probe), names, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ValueError(f"{key} = {value!r}: must be one of {names}{hint}")
