from butler.config.loader import load_config as load_config
from butler.config.loader import parse_config as parse_config
from butler.config.model import Config as Config
from butler.config.node import ConfigError as ConfigError

__all__ = ["Config", "ConfigError", "load_config", "parse_config"]
