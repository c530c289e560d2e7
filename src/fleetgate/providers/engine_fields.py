"""What a client may not tell an engine: the body fields only the gateway sets.

vLLM and SGLang take fields beside OpenAI's that steer the engine rather than the answer:
where a decode engine pulls its KV cache from, which id the engine files a request under, its
place in the engine's queue, which prefix-cache partition it may hit, code or files the engine
host loads. From a client they reach other tenants' requests or other hosts (a
``kv_transfer_params`` with ``remote_host`` points a decode at any host's KV blocks), so none
of them passes from a client to an engine. The gateway sets those it uses itself, per
attempt (`fleetgate.routing.context.Pick.extra_body`): ``cache_salt`` per tenant
(`fleetgate.routing.salt`, which namespaces a caller's own salt under its tenant),
``priority`` from the scheduler's band (`fleetgate.scheduling.stage.PriorityHook`),
``kv_transfer_params`` of a pd-disagg pair and ``ec_transfer_params`` of an encoder pool.

`sealed` is applied by the dispatcher to every upstream call (chat, completions, embeddings,
``/v1/messages`` and ``/v1/responses`` translated to chat, batch lines), and `client_fields`
to the bodies routing sends on its own (a pd-disagg prefill).

Example::

    sealed(call, {"cache_salt": "3f2a..."})  # the client's cache_salt, priority... are gone
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetgate.providers.base import UpstreamCall

__all__ = ["ENGINE_ONLY", "client_fields", "sealed"]

# Every name, with why it is the engine's and not the client's. A name another engine uses
# for something harmless is stripped all the same: the body goes to whatever serves the alias.
ENGINE_ONLY: frozenset[str] = frozenset(
    {
        # vLLM
        "kv_transfer_params",  # P/D disaggregation: remote host, port, engine, KV block ids
        "ec_transfer_params",  # encoder disaggregation: where the image embeddings are
        "vllm_xargs",  # free-form arguments for engine extensions (logits processors, KV
        # connectors) that the operator installed
        "request_id",  # the engine's id of the request (aborts, KV transfers are keyed by it)
        "cache_salt",  # the prefix-cache partition: the gateway's per tenant
        "priority",  # the engine queue's order: the gateway's, from the scheduler's band
        "session_id",  # tags the KV blocks in the KV events that cache-aware routers read
        "prompt_embeds",  # tensors the engine deserialises; the gateway cannot check them
        # SGLang
        "rid",  # the engine's request id
        "bootstrap_host",  # P/D disaggregation: the prefill server to pull KV from
        "bootstrap_port",
        "bootstrap_room",  # the KV transfer's rendezvous id
        "routed_dp_rank",  # pins a data-parallel worker (the engine balances them)
        "data_parallel_rank",
        "disagg_prefill_dp_rank",  # the prefill worker a decode pulls KV from
        "session_params",  # continues another request's KV by its id
        "extra_key",  # a prefix-cache partition, as cache_salt
        "lora_path",  # an adapter loaded from a path on the engine host
        "custom_logit_processor",  # serialised Python run by the engine
        "custom_params",  # the arguments of that processor
        "custom_labels",  # labels of the engine's metrics, shared by every tenant
        "input_ids",  # chat token ids that replace the messages the gateway checked
    }
)


def client_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` without the fields only the gateway sets (a new dict; ``body`` is unchanged)."""
    return {k: v for k, v in body.items() if k not in ENGINE_ONLY}


def sealed(call: UpstreamCall, gateway: Mapping[str, Any] | None) -> UpstreamCall:
    """``call`` with the engine's fields exactly as the gateway set them (``gateway``: the
    attempt's `Pick.extra_body`), whatever the client put in its body or Responses fields."""
    if gateway or not ENGINE_ONLY.isdisjoint(call.body):  # else nothing to drop or set
        body = client_fields(call.body)
        if gateway:
            body.update((k, v) for k, v in gateway.items() if k in ENGINE_ONLY)
        call.body = body
    if call.responses:
        call.responses = client_fields(call.responses)
    return call
