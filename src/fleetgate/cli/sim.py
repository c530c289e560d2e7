"""``fleetgate sim``: serve a simulated vLLM engine until SIGINT/SIGTERM.

Prints one line ``fleetgate sim: serving MODEL at http://HOST:PORT`` once listening (with
``--port 0`` this is how a parent process learns the port).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

from fleetgate.cli.parsers import add_command
from fleetgate.errors import ConfigError
from fleetgate.sim.config import FaultConfig, SimConfig
from fleetgate.sim.runner import start_sim

__all__ = ["config_from_args", "register", "run"]


# ``SimConfig`` fields set straight from a flag of the same name (``--max-num-seqs`` for
# ``max_num_seqs``), in ``--help`` order, with their help (None: the name says it); each flag
# takes the field's default and its type.
_ENGINE_FLAGS: dict[str, str | None] = {
    "corrupt_fraction": "echo mode: this fraction of prompts (chosen by a hash of the prompt, "
    "so always the same ones) is answered with wrong words instead",
    "corrupt_after_tokens": "with --corrupt-fraction: a corrupted answer is right for its first "
    "N tokens and wrong after them (a build that degrades only on long generations)",
    "max_num_seqs": None,
    "max_num_batched_tokens": None,
    "max_model_len": None,
    "prefill_ms_per_token": None,
    "decode_ms_per_step": None,
    "decode_batch_factor": "decode step = decode-ms-per-step * (1 + factor * (running - 1))",
    "kv_blocks": None,
    "block_size": None,
    "seed": None,
    "output_len": None,
    "image_tokens": None,
    "embedding_dim": None,
    "wake_up_s": "sleep mode: seconds POST /wake_up takes",
    "kv_transfer_ms_per_token": "disaggregated decode: time to pull a prompt token's KV from "
    "the prefill engine",
    "encode_ms_per_image_token": "vision encoder time per image token (0: encoding is free)",
    "encoder_cache_items": None,
    "ec_transfer_ms_per_token": "a consumer's time to pull a remotely encoded image, per "
    "encoder token",
}
# ``FaultConfig`` fields, the same way.
_FAULT_FLAGS: dict[str, str | None] = dict.fromkeys(
    (
        "error_rate",
        "error_status",
        "retry_after",
        "spike_rate",
        "spike_ms",
        "hang_rate",
        "reset_rate",
        "garbage_rate",
        "midstream_rate",
        "midstream_after",
    )
)


def _add_field_flags(
    p: argparse.ArgumentParser, defaults: object, flags: dict[str, str | None]
) -> None:
    for name, help in flags.items():
        default = getattr(defaults, name)
        flag = "--" + name.replace("_", "-")
        p.add_argument(flag, type=type(default), default=default, help=help)


def _field_values(args: argparse.Namespace, flags: dict[str, str | None]) -> dict[str, Any]:
    return {name: getattr(args, name) for name in flags}


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``sim`` sub-command to the ``fleetgate`` parser."""
    d = SimConfig()
    p = add_command(
        sub, "sim", "run a simulated vLLM engine (OpenAI-compatible, no GPU)", SimConfig.__doc__
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--model", default=d.model, help="served model name")
    p.add_argument("--mode", choices=["echo", "random"], default=d.mode)
    p.add_argument(
        "--scheduling-policy",
        choices=["fcfs", "priority"],
        default=d.scheduling_policy,
        help="priority: admit waiting requests by their `priority` field (lower first) and "
        "preempt the least important when KV runs out (vLLM v1)",
    )
    p.add_argument(
        "--preempt-for-priority",
        action="store_true",
        help="with --scheduling-policy priority: also preempt the least important running "
        "request for a more important waiting one when max-num-seqs are running (vLLM V0)",
    )
    p.add_argument(
        "--kv-events-config",
        default=None,
        help='vLLM\'s flag: JSON {"enable_kv_cache_events": true, "publisher": "zmq", '
        '"endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558", "topic": ""}',
    )
    p.add_argument(
        "--ec-transfer-config",
        default=None,
        help='vLLM\'s encoder disaggregation flag: JSON {"ec_role": "ec_producer"} (an encoder '
        'instance) or {"ec_role": "ec_consumer"} (a language-model instance)',
    )
    _add_field_flags(p, d, _ENGINE_FLAGS)
    _add_field_flags(p, FaultConfig(), _FAULT_FLAGS)
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """The ``SimConfig`` the parsed flags describe."""
    events = _kv_events(args.kv_events_config)
    return SimConfig(
        kv_events_endpoint=events.get("endpoint"),
        kv_events_replay_endpoint=events.get("replay_endpoint"),
        kv_events_topic=events.get("topic") or "",
        model=args.model,
        mode=args.mode,
        scheduling_policy=args.scheduling_policy,
        preempt_for_priority=args.preempt_for_priority,
        ec_role=_ec_role(args.ec_transfer_config),
        faults=FaultConfig(**_field_values(args, _FAULT_FLAGS)),
        **_field_values(args, _ENGINE_FLAGS),
    )


def _ec_role(text: str | None) -> Any:
    """The ``ec_role`` of vLLM's ``--ec-transfer-config`` JSON (None when absent)."""
    if not text:
        return None
    try:
        cfg = json.loads(text)
    except ValueError as exc:
        raise SystemExit(f"--ec-transfer-config is not JSON: {exc}") from exc
    role = cfg.get("ec_role") if isinstance(cfg, dict) else None
    if role not in ("ec_producer", "ec_consumer"):
        raise SystemExit("--ec-transfer-config needs ec_role ec_producer or ec_consumer")
    return role


def _kv_events(text: str | None) -> dict[str, str]:
    """The endpoints of vLLM's ``--kv-events-config`` JSON (empty when events are off)."""
    if not text:
        return {}
    try:
        cfg = json.loads(text)
    except ValueError as exc:
        raise SystemExit(f"--kv-events-config is not JSON: {exc}") from exc
    if not isinstance(cfg, dict) or not cfg.get("enable_kv_cache_events"):
        return {}
    if cfg.get("publisher", "zmq") != "zmq":
        raise SystemExit("--kv-events-config: the simulator publishes with zmq only")
    out = {
        k: cfg[k] for k in ("endpoint", "replay_endpoint", "topic") if isinstance(cfg.get(k), str)
    }
    out.setdefault("endpoint", "tcp://*:5557")
    return out


async def _serve(config: SimConfig, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner, base_url = await start_sim(config, host=host, port=port)
    print(f"fleetgate sim: serving {config.model} at {base_url}", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; 0 on a clean stop, 2 on a bad configuration."""
    config = config_from_args(args)
    try:
        config.validate()
    except ConfigError as exc:
        print(f"fleetgate sim: {exc.message}", file=sys.stderr)
        return 2
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        asyncio.run(_serve(config, args.host, args.port))
    else:
        uvloop.run(_serve(config, args.host, args.port))
    return 0
