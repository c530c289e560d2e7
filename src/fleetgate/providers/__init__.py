"""Providers: one module or package per upstream family, all speaking OpenAI format to the
gateway (``anthropic/`` is the outbound Anthropic package; the inbound ``/v1/messages`` front
door is ``fleetgate.api.messages``)."""
