"""Configuration: process `Settings` and the validated YAML `GatewayConfig`."""

from fleetgate.config.loader import load_config, parse_config
from fleetgate.config.schema import AliasConfig, DeploymentConfig, GatewayConfig, Price
from fleetgate.config.settings import Settings

__all__ = [
    "AliasConfig",
    "DeploymentConfig",
    "GatewayConfig",
    "Price",
    "Settings",
    "load_config",
    "parse_config",
]
