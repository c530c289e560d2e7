"""The simulator as a prefill or a decode engine of vLLM's disaggregated serving (NIXL-style).

The proxy (here: the gateway's ``pd-disagg`` strategy) sends the prompt to a *prefill* engine
with ``max_tokens: 1`` and ``"kv_transfer_params": {"do_remote_decode": true, ...}``; that
engine computes the prompt's KV and answers with ``kv_transfer_params`` saying where the blocks
are (``do_remote_prefill: true``, ``remote_engine_id``, ``remote_block_ids``, ``remote_host``,
``remote_port``, ``tp_size``). The proxy then sends the original request to a *decode* engine
with those parameters; it pulls the KV (modelled: ``kv_transfer_ms_per_token`` per prompt
token missing from its own prefix cache, as vLLM's NIXL connector pulls only the blocks the
decode engine does not hold) instead of computing it, and generates the output.

Example::

    role = transfer_role(body)           # "prefill", "decode" or None (aggregated)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import orjson

from fleetgate.errors import InvalidRequest
from fleetgate.sim.sequence import Sequence as Seq

__all__ = ["TransferRole", "engine_id", "transfer_params", "transfer_role", "with_transfer_params"]

TransferRole = Literal["prefill", "decode"]


def transfer_role(body: Mapping[str, Any]) -> TransferRole | None:
    """Which half of a disaggregated request ``body`` asks for (400 on malformed params)."""
    params = body.get("kv_transfer_params")
    if params is None:
        return None
    if not isinstance(params, dict):
        raise InvalidRequest("'kv_transfer_params' must be an object", param="kv_transfer_params")
    if params.get("do_remote_decode") is True:
        return "prefill"
    if params.get("do_remote_prefill") is True:
        blocks = params.get("remote_block_ids")
        if not isinstance(blocks, list) or not isinstance(params.get("remote_engine_id"), str):
            raise InvalidRequest(
                "kv_transfer_params with do_remote_prefill need remote_engine_id and "
                "remote_block_ids (from the prefill engine's answer)",
                param="kv_transfer_params",
            )
        return "decode"
    return None


def transfer_params(seqs: Sequence[Seq], engine_id: str, host: str, port: int) -> dict[str, Any]:
    """What a prefill engine answers: where the decode engine finds the prompt's KV blocks
    (the simulator names its blocks by their prefix hashes: they stay cached after prefill)."""
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": engine_id,
        "remote_block_ids": list(seqs[0].hashes) if seqs else [],
        "remote_host": host,
        "remote_port": port,
        "tp_size": 1,
    }


def with_transfer_params(body: bytes, params: Mapping[str, Any]) -> bytes:
    """A non-streamed completion ``body`` with ``kv_transfer_params`` added (as vLLM does)."""
    answer = orjson.loads(body)
    answer["kv_transfer_params"] = dict(params)
    return orjson.dumps(answer)


def engine_id() -> str:
    return f"sim-{os.getpid()}-{os.urandom(4).hex()}"
