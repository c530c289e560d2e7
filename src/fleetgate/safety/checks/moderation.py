"""Client for OpenAI-format ``/moderations`` endpoints (OpenAI, or any compatible server).

Example::

    check = ModerationCheck(base_url="https://api.openai.com/v1", api_key=KEY,
                            model="omni-moderation-latest", http=resources.http)

Flags when the endpoint says ``flagged`` (or, with ``threshold``, when any category score reaches
it); categories are the endpoint's names (``violence``, ``self-harm/intent``, ...). Failures return
a counted ``error`` verdict.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from fleetgate.resources.outbound import JsonService, OutboundHttp
from fleetgate.safety.base import Action, CheckContext, Verdict

_BAD_ANSWER = (ValueError, KeyError, IndexError, TypeError)

__all__ = ["ModerationCheck"]


class ModerationCheck:
    """Asks an OpenAI-format moderation endpoint about one text."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str = "omni-moderation-latest",
        api_key: str | None = None,
        threshold: float | None = None,
        timeout_s: float = 10.0,
        on_error: Action = Action.ALLOW,
        name: str = "moderation",
        http: OutboundHttp,
    ) -> None:
        """``http``: the process's outbound session (the resource owner closes it)."""
        self.name = name
        self.model = model
        self.threshold = threshold
        self.on_error = on_error
        self.failures = 0
        self._http = JsonService(base_url, api_key=api_key, timeout_s=timeout_s, http=http)

    def _judge(self, result: dict[str, Any]) -> tuple[bool, list[str], float]:
        cats = result.get("categories") or {}
        scores = result.get("category_scores") or {}
        hit = [str(k) for k, v in cats.items() if v]
        top = max((float(v) for v in scores.values()), default=0.0)
        if self.threshold is not None:
            hit = sorted(
                set(hit) | {str(k) for k, v in scores.items() if float(v) >= self.threshold}
            )
            return bool(hit), hit, top
        return bool(result["flagged"]), hit, top

    async def check(self, text: str, ctx: CheckContext) -> Verdict:
        try:
            body = await self._http.post_json("/moderations", {"model": self.model, "input": text})
            flagged, categories, score = self._judge(body["results"][0])
        except (TimeoutError, aiohttp.ClientError, *_BAD_ANSWER) as exc:
            self.failures += 1
            return Verdict.failed(
                self.name, f"moderation failed: {exc!r}"[:300], action=self.on_error
            )
        if not flagged:
            return Verdict.allow(self.name, score=score)
        return Verdict.block(self.name, categories or ["flagged"], score=score)
