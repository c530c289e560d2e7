"""The OpenAI Responses API (``/v1/responses``), bridged to chat completions.

A Responses request is translated into an OpenAI chat request and takes the same request path
as ``/v1/chat/completions`` (keys, limits, budgets, guardrails incl. stream checks, routing,
spend); the answer is translated back into a ``response`` object or the Responses streaming
events. State for ``previous_response_id`` is kept per tenant in the database.

- ``config``: the ``responses:`` config section (retention);
- ``request``: Responses request -> chat messages and chat request fields (errors name the
  field);
- ``output``: chat completion (or a stream's accumulated chunks) -> ``response`` object;
- ``stream``: chat chunks -> Responses streaming events;
- ``store``: stored responses and their conversation turns, per tenant;
- ``stage``: binds a Responses request to its stream (records what the client was sent);
- ``handlers``: the routes; ``feature``: `ResponsesFeature`.

This ``__init__`` imports nothing, so the config schema can import ``config`` alone.
"""
