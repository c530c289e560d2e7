"""Upstreams that speak OpenAI's Responses API natively (``responses_api: native``): the
gateway's chat form translated to ``/v1/responses`` and back (see `native`)."""

from fleetgate.providers.responses.native import NativeResponses

__all__ = ["NativeResponses"]
