"""Ways in from other gateways: LiteLLM's proxy config and its database."""

from fleetgate.importers.litellm_config import ImportResult, convert_litellm_config
from fleetgate.importers.litellm_db import DbImportReport, import_litellm_db

__all__ = ["DbImportReport", "ImportResult", "convert_litellm_config", "import_litellm_db"]
