"""The ``disclosure:`` section: what the gateway discloses about the model behind each alias.

Where a regulator requires it (China's generative-AI service filing, for one), an answer must
carry the name the model was registered under and the service's filing number. Opt-in: absent
(or ``enabled: false``), nothing is added.

Example::

    disclosure:
      model_name: Acme Assistant            # the default for every alias
      filing_number: Beijing-AcmeAssistant-20240101
      aliases:
        chat-zh: {model_name: Acme 中文助手, filing_number: 网信算备110108000000000000001号}
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fleetgate.config.sections import OptionalSection

__all__ = ["DISCLOSURE_SECTION", "AliasDisclosure", "DisclosureConfig"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AliasDisclosure(_Model):
    # the name the model behind the alias is registered under (default: the section's)
    model_name: str | None = Field(None, min_length=1, max_length=200)
    # the filing (registration) number to show with its answers (default: the section's)
    filing_number: str | None = Field(None, min_length=1, max_length=200)


class DisclosureConfig(_Model):
    # false: the feature is off (as when the section is absent)
    enabled: bool = True
    # the registered model name for aliases not listed in `aliases`
    model_name: str | None = Field(None, min_length=1, max_length=200)
    # the filing number for aliases not listed in `aliases`
    filing_number: str | None = Field(None, min_length=1, max_length=200)
    # per alias, over the defaults above
    aliases: dict[str, AliasDisclosure] = Field(default_factory=dict)

    def of(self, alias: str) -> tuple[str | None, str | None]:
        """(registered model name, filing number) for ``alias``."""
        own = self.aliases.get(alias)
        if own is None:
            return self.model_name, self.filing_number
        return own.model_name or self.model_name, own.filing_number or self.filing_number


DISCLOSURE_SECTION = OptionalSection(
    "disclosure",
    DisclosureConfig,
    reload={"": "live", "enabled": "restart"},  # names and numbers: at once
    presence_restart=("",),  # its stage joins the request path at start
)
"""The ``disclosure`` section (opt-in)."""
