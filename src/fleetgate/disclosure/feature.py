"""`DisclosureFeature`: every answer of an alias carries its registered model name and filing
number, and ``GET /disclosure`` lists them for everyone to see (no key).

Headers (RFC 8187 encoding for non-ASCII text, since HTTP header values are Latin-1)::

    x-fleetgate-model-name: Acme Assistant
    x-fleetgate-filing-number: Beijing-AcmeAssistant-20240101

They are set before the request is sent upstream, so refused and blocked answers carry them
too, and streams carry them in their response head. The console reads them through the
`DISCLOSURE` port (its models page, per alias) and shows an answer's own headers under it in
the playground.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote

from aiohttp import web

from fleetgate.config.schema import GatewayConfig
from fleetgate.contract.request import GatewayRequest, Outcome
from fleetgate.core import Core
from fleetgate.disclosure.config import DISCLOSURE_SECTION, DisclosureConfig
from fleetgate.disclosure.current import Disclosures
from fleetgate.disclosure.ports import DISCLOSURE
from fleetgate.feature import BaseFeature, Switch
from fleetgate.http import json_reply

__all__ = ["MODEL_HEADER", "NUMBER_HEADER", "DisclosureFeature", "header_value"]

MODEL_HEADER = "x-fleetgate-model-name"
NUMBER_HEADER = "x-fleetgate-filing-number"


def header_value(text: str) -> str:
    """``text`` as a header value: as is when printable ASCII, else ``UTF-8''`` and
    percent-encoded (RFC 8187's ext-value), which every client can decode."""
    if text.isascii() and text.isprintable():
        return text
    return "UTF-8''" + quote(text, safe="")


class _Stage:
    name = "disclosure"

    def __init__(self, feature: DisclosureFeature) -> None:
        self._feature = feature

    async def before(self, req: GatewayRequest) -> None:
        model, number = self._feature.disclosures.of(req.alias)
        if model:
            req.response_headers[MODEL_HEADER] = header_value(model)
        if number:
            req.response_headers[NUMBER_HEADER] = header_value(number)

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        return None


class DisclosureFeature(BaseFeature):
    name = "disclosure"
    sections = (DISCLOSURE_SECTION,)
    switch = Switch("disclosure", opt_in=True)

    def __init__(self, config: DisclosureConfig, aliases: Iterable[str]) -> None:
        self.disclosures = Disclosures(config, aliases)
        self.stage = _Stage(self)

    @property
    def config(self) -> DisclosureConfig:
        return self.disclosures.config

    @classmethod
    def build(cls, core: Core) -> DisclosureFeature | None:
        """The feature (None when the section is off); provides `DISCLOSURE`."""
        config = DISCLOSURE_SECTION.of(core.config)
        if config is None:
            return None
        feature = cls(config, (m.alias for m in core.config.models))
        core.ports.provide(DISCLOSURE, feature.disclosures)  # the console's pages read it
        return feature

    def reconfigure(self, config: GatewayConfig) -> None:
        section = DISCLOSURE_SECTION.of(config) or DisclosureConfig()  # removed: none shown
        self.disclosures.update(section, (m.alias for m in config.models))

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return [web.get("/disclosure", self.listing)]

    async def listing(self, request: web.Request) -> web.Response:
        """Public: each alias's registered model name and filing number."""
        rows = [d.to_dict() for d in self.disclosures.rows()]
        return json_reply({"object": "list", "data": rows})
