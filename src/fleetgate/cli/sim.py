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

from fleetgate.errors import ConfigError
from fleetgate.sim.config import FaultConfig, SimConfig
from fleetgate.sim.runner import start_sim

__all__ = ["config_from_args", "register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``sim`` sub-command to the ``fleetgate`` parser."""
    d = SimConfig()
    f = FaultConfig()
    p = sub.add_parser(
        "sim",
        help="run a simulated vLLM engine (OpenAI-compatible, no GPU)",
        description=SimConfig.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--model", default=d.model, help="served model name")
    p.add_argument("--mode", choices=["echo", "random"], default=d.mode)
    p.add_argument(
        "--corrupt-fraction",
        type=float,
        default=d.corrupt_fraction,
        help="echo mode: this fraction of prompts (chosen by a hash of the prompt, so always "
        "the same ones) is answered with wrong words instead",
    )
    p.add_argument(
        "--corrupt-after-tokens",
        type=int,
        default=d.corrupt_after_tokens,
        help="with --corrupt-fraction: a corrupted answer is right for its first N tokens and "
        "wrong after them (a build that degrades only on long generations)",
    )
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    p.add_argument("--max-num-batched-tokens", type=int, default=d.max_num_batched_tokens)
    p.add_argument("--max-model-len", type=int, default=d.max_model_len)
    p.add_argument("--prefill-ms-per-token", type=float, default=d.prefill_ms_per_token)
    p.add_argument("--decode-ms-per-step", type=float, default=d.decode_ms_per_step)
    p.add_argument(
        "--decode-batch-factor",
        type=float,
        default=d.decode_batch_factor,
        help="decode step = decode-ms-per-step * (1 + factor * (running - 1))",
    )
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
    p.add_argument("--kv-blocks", type=int, default=d.kv_blocks)
    p.add_argument("--block-size", type=int, default=d.block_size)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--output-len", type=int, default=d.output_len)
    p.add_argument("--image-tokens", type=int, default=d.image_tokens)
    p.add_argument("--embedding-dim", type=int, default=d.embedding_dim)
    p.add_argument(
        "--wake-up-s",
        type=float,
        default=d.wake_up_s,
        help="sleep mode: seconds POST /wake_up takes",
    )
    p.add_argument(
        "--kv-events-config",
        default=None,
        help='vLLM\'s flag: JSON {"enable_kv_cache_events": true, "publisher": "zmq", '
        '"endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558", "topic": ""}',
    )
    p.add_argument(
        "--kv-transfer-ms-per-token",
        type=float,
        default=d.kv_transfer_ms_per_token,
        help="disaggregated decode: time to pull a prompt token's KV from the prefill engine",
    )
    p.add_argument(
        "--encode-ms-per-image-token",
        type=float,
        default=d.encode_ms_per_image_token,
        help="vision encoder time per image token (0: encoding is free)",
    )
    p.add_argument("--encoder-cache-items", type=int, default=d.encoder_cache_items)
    p.add_argument(
        "--ec-transfer-config",
        default=None,
        help='vLLM\'s encoder disaggregation flag: JSON {"ec_role": "ec_producer"} (an encoder '
        'instance) or {"ec_role": "ec_consumer"} (a language-model instance)',
    )
    p.add_argument(
        "--ec-transfer-ms-per-token",
        type=float,
        default=d.ec_transfer_ms_per_token,
        help="a consumer's time to pull a remotely encoded image, per encoder token",
    )
    p.add_argument("--error-rate", type=float, default=f.error_rate)
    p.add_argument("--error-status", type=int, default=f.error_status)
    p.add_argument("--retry-after", type=float, default=f.retry_after)
    p.add_argument("--spike-rate", type=float, default=f.spike_rate)
    p.add_argument("--spike-ms", type=float, default=f.spike_ms)
    p.add_argument("--hang-rate", type=float, default=f.hang_rate)
    p.add_argument("--reset-rate", type=float, default=f.reset_rate)
    p.add_argument("--garbage-rate", type=float, default=f.garbage_rate)
    p.add_argument("--midstream-rate", type=float, default=f.midstream_rate)
    p.add_argument("--midstream-after", type=int, default=f.midstream_after)
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """The ``SimConfig`` the parsed flags describe."""
    faults = FaultConfig(
        error_rate=args.error_rate,
        error_status=args.error_status,
        retry_after=args.retry_after,
        spike_rate=args.spike_rate,
        spike_ms=args.spike_ms,
        hang_rate=args.hang_rate,
        reset_rate=args.reset_rate,
        garbage_rate=args.garbage_rate,
        midstream_rate=args.midstream_rate,
        midstream_after=args.midstream_after,
    )
    events = _kv_events(args.kv_events_config)
    return SimConfig(
        kv_events_endpoint=events.get("endpoint"),
        kv_events_replay_endpoint=events.get("replay_endpoint"),
        kv_events_topic=events.get("topic") or "",
        model=args.model,
        mode=args.mode,
        corrupt_fraction=args.corrupt_fraction,
        corrupt_after_tokens=args.corrupt_after_tokens,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        prefill_ms_per_token=args.prefill_ms_per_token,
        decode_ms_per_step=args.decode_ms_per_step,
        decode_batch_factor=args.decode_batch_factor,
        scheduling_policy=args.scheduling_policy,
        preempt_for_priority=args.preempt_for_priority,
        kv_blocks=args.kv_blocks,
        block_size=args.block_size,
        seed=args.seed,
        output_len=args.output_len,
        image_tokens=args.image_tokens,
        embedding_dim=args.embedding_dim,
        wake_up_s=args.wake_up_s,
        kv_transfer_ms_per_token=args.kv_transfer_ms_per_token,
        encode_ms_per_image_token=args.encode_ms_per_image_token,
        encoder_cache_items=args.encoder_cache_items,
        ec_role=_ec_role(args.ec_transfer_config),
        ec_transfer_ms_per_token=args.ec_transfer_ms_per_token,
        faults=faults,
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
