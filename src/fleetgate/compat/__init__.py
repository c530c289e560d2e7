"""Compatibility layers: other gateways' client-facing forms served over fleetgate's own path.

Each layer is one feature (`fleetgate.compat.litellm`: LiteLLM proxy clients).
"""
