"""Clients configured for a LiteLLM proxy work against fleetgate (see `feature`)."""

from fleetgate.compat.litellm.feature import LiteLLMFeature

__all__ = ["LiteLLMFeature"]
