"""The ``semantic`` feature: the intent router's stage (when the config has ``semantic:``).

Its stage resolves the virtual alias (``auto``) to a configured one by intent; see
docs/routing.md and `fleetgate.routing.semantic_stage`.
"""

from __future__ import annotations

from fleetgate.contract.stages import Stage
from fleetgate.core import Core
from fleetgate.feature import BaseFeature, Switch
from fleetgate.routing.ports import SEMANTIC
from fleetgate.routing.semantic_config import SEMANTIC_SECTION
from fleetgate.routing.semantic_stage import SemanticStage

__all__ = ["SemanticFeature"]


class SemanticFeature(BaseFeature):
    """The intent router's stage; it loads its model in the background after ``start``."""

    name = "semantic"
    sections = (SEMANTIC_SECTION,)
    switch = Switch("semantic", opt_in=True)  # on when a `semantic:` section is there

    def __init__(self, stage: SemanticStage) -> None:
        self.router = stage
        self.stage: Stage | None = stage

    @classmethod
    def build(cls, core: Core) -> SemanticFeature | None:
        """Provides `SEMANTIC`; its alias (``auto``) becomes one the core accepts."""
        section = SEMANTIC_SECTION.of(core.config)
        if section is None:
            return None
        stage = SemanticStage(section, core.settings.data_dir, minilm=core.resources.minilm)
        core.ports.provide(SEMANTIC, stage)
        core.virtual_aliases.add(stage.alias)
        return cls(stage)

    @property
    def alias(self) -> str:
        """The virtual alias this router resolves (``auto``)."""
        return self.router.alias

    async def start(self) -> None:
        await self.router.start()

    async def aclose(self) -> None:
        await self.router.aclose()
