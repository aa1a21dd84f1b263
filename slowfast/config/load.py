"""Load a config once: defaults, then YAML files in order, then overrides.

Every value is checked against the type of its default while it is merged, so
an unknown key, a wrong type or a malformed override fails with one line that
names the key and where it came from. The result is validated and frozen.
"""

import ast
import difflib
import os
from typing import Any, Callable, Iterable, Sequence

import yaml
from fvcore.common.config import CfgNode

from slowfast.config.defaults import get_cfg
from slowfast.config.validate import validate_cfg
from slowfast.utils.errors import EXIT_CONFIG, UserError


class ConfigError(UserError, ValueError):
    """A config file, key or value is wrong; the message is one line."""

    exit_status = EXIT_CONFIG


def _decode(value: Any) -> Any:
    """Decodes a string the way yacs does (``"1e-4"`` -> 1e-4), else returns it."""
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def _coerce(value: Any, default: Any, key: str, source: str) -> Any:
    """Returns ``value`` converted to the type of ``default``, or raises.

    Args:
        value: the new value (from YAML or the command line).
        default: the current value of the key, whose type rules.
        key: full key name, for the error message.
        source: where the value came from, for the error message.

    Returns:
        The value with the default's type.
    """
    if default is None or value is None:
        return value
    if isinstance(default, str):
        if isinstance(value, str):
            return value
    else:
        value = _decode(value)
        if isinstance(default, bool):
            if isinstance(value, bool):
                return value
        elif isinstance(default, int):
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif isinstance(default, float):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        elif isinstance(default, (list, tuple)):
            if isinstance(value, (list, tuple)):
                return type(default)(value)
    raise ConfigError(
        f"{source}: {key} expects {type(default).__name__} "
        f"(default {default!r}), got {value!r}"
    )


def _merge(cfg: CfgNode, values: dict, source: str, prefix: str = "") -> None:
    """Merges a nested dict into ``cfg`` with type checks."""
    for name, value in values.items():
        key = prefix + str(name)
        if name not in cfg:
            close = difflib.get_close_matches(str(name), list(cfg.keys()), n=1)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
            raise ConfigError(f"{source}: unknown config key {key}{hint}")
        current = cfg[name]
        if isinstance(current, CfgNode):
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{source}: {key} is a section; expected a mapping, got {value!r}"
                )
            _merge(current, value, source, key + ".")
        else:
            cfg[name] = _coerce(value, current, key, source)


def _read_yaml(path: str) -> dict:
    """Reads one YAML config file (with fvcore's ``_BASE_`` inheritance)."""
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: config file not found")
    try:
        data = CfgNode.load_yaml_with_base(path, allow_unsafe=True)
    except yaml.YAMLError as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = path
        if mark is not None:
            name = mark.name if mark.name and not mark.name.startswith("<") else path
            where = f"{name}, line {mark.line + 1}, column {mark.column + 1}"
        raise ConfigError(f"{where}: not valid YAML ({first})") from err
    except FileNotFoundError as err:
        raise ConfigError(
            f"{path}: _BASE_ file {err.filename} not found (a _BASE_ path is "
            "relative to the file that names it)"
        ) from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at top level")
    return data


def _parse_opts(opts: Sequence[str]) -> dict:
    """Turns ``["A.B", "1", "C.D", "x"]`` into a nested dict."""
    if len(opts) % 2:
        raise ConfigError(
            f"command line: overrides come as KEY VALUE pairs; {opts[-1]!r} "
            "has no value"
        )
    nested: dict = {}
    for key, raw in zip(opts[0::2], opts[1::2]):
        try:
            value = yaml.safe_load(raw) if isinstance(raw, str) else raw
        except yaml.YAMLError:
            value = raw
        if isinstance(value, str):
            value = _decode(value)
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(
                    f"command line: {key} conflicts with another override"
                )
        node[parts[-1]] = value
    return nested


def load_config(
    cfg_files: Iterable[str] = (),
    opts: Sequence[str] = (),
    checks: Sequence[Callable[[CfgNode], None]] = (),
) -> CfgNode:
    """Builds the run's config: defaults, then files in order, then overrides.

    Args:
        cfg_files: YAML files merged in order (later files win).
        opts: ``KEY VALUE`` overrides applied after all files.
        checks: more checks of the merged config, each raising a one-line
            ValueError (e.g. the registries' name checks, which
            ``slowfast.launch.config.load_run_config`` passes).

    Returns:
        CfgNode: the validated, frozen config.

    Raises:
        ConfigError: an unknown key, a wrong type or a bad value (one line).
    """
    cfg = get_cfg()
    sources = []
    for path in cfg_files:
        _merge(cfg, _read_yaml(path), path)
        sources.append(path)
    if opts:
        _merge(cfg, _parse_opts(list(opts)), "command line")
        sources.append("command line")
    try:
        validate_cfg(cfg)
        for check in checks:
            check(cfg)
    except ValueError as err:
        origin = ", ".join(sources) if sources else "defaults"
        raise ConfigError(f"{err} (config from: {origin})") from err
    cfg.freeze()
    return cfg
