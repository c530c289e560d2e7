"""The ``semantic`` feature: the intent router's stage (when the config has ``semantic:``).

Its stage resolves the virtual alias (``auto``) to a configured one by intent; see
docs/routing.md and `fleetgate.routing.semantic_stage`.
"""

from __future__ import annotations

from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.contract.stages import Stage
from fleetgate.feature import BaseFeature
from fleetgate.resources import Resources
from fleetgate.routing.semantic_config import SEMANTIC_SECTION
from fleetgate.routing.semantic_stage import SemanticStage

__all__ = ["SemanticFeature"]


class SemanticFeature(BaseFeature):
    """The intent router's stage; it loads its model in the background after ``start``."""

    name = "semantic"

    def __init__(self, stage: SemanticStage) -> None:
        self.router = stage
        self.stage: Stage | None = stage

    @classmethod
    def build(
        cls, settings: Settings, config: GatewayConfig, resources: Resources
    ) -> SemanticFeature | None:
        section = SEMANTIC_SECTION.of(config)
        if section is None:
            return None
        return cls(SemanticStage(section, settings.data_dir, minilm=resources.minilm))

    @property
    def alias(self) -> str:
        """The virtual alias this router resolves (``auto``)."""
        return self.router.alias

    async def start(self) -> None:
        await self.router.start()

    async def aclose(self) -> None:
        await self.router.aclose()
