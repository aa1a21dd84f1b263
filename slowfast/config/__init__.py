"""Config tree, loading and validation."""

from slowfast.config.defaults import get_cfg
from slowfast.config.load import ConfigError, load_config

__all__ = ["ConfigError", "get_cfg", "load_config"]
