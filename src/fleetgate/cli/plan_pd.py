"""``fleetgate plan pd``: prefill and decode pool sizes for a workload and its SLOs.

The engine's speed is measured against one idle engine (``--engine-url``, vLLM or ``fleetgate
sim``) or typed in (``--prefill-ms-per-token``, ``--decode-ms-per-step``,
``--decode-batch-factor``); the sizing is `fleetgate.plan.pd.size_pd`.

Example::

    fleetgate plan pd --rate 8 --prompt-tokens 8192 --output-tokens 24 --cached-fraction 0.75 \\
        --ttft-ms 600 --itl-ms 15 --engine-url http://10.0.0.5:8000/v1 --model llama
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from fleetgate.cli.output import print_result
from fleetgate.cli.parsers import add_command
from fleetgate.errors import FleetgateError, InvalidRequest
from fleetgate.plan.engine_probe import probe_engine
from fleetgate.plan.pd import EngineSpeed, PdWorkload, size_pd

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``pd`` under ``fleetgate plan``."""
    p = add_command(sub, "pd", "size prefill and decode pools for a workload and its SLOs", __doc__)
    w = p.add_argument_group("workload")
    w.add_argument("--rate", type=float, required=True, help="requests per second")
    w.add_argument("--prompt-tokens", type=float, required=True)
    w.add_argument("--output-tokens", type=float, required=True)
    w.add_argument("--cached-fraction", type=float, default=0.0,
                   help="share of the prompt served from the prefix cache")  # fmt: skip
    w.add_argument("--cold-fraction", type=float, default=0.0,
                   help="share of requests that find nothing cached")  # fmt: skip
    w.add_argument("--ttft-ms", type=float, help="TTFT target at --quantile")
    w.add_argument("--itl-ms", type=float, help="inter-token latency target")
    w.add_argument("--quantile", type=float, default=0.9)
    w.add_argument("--service-cv", type=float, default=0.0,
                   help="spread of the prefill time (coefficient of variation)")  # fmt: skip
    e = p.add_argument_group("engine (measured with --engine-url, or typed in)")
    e.add_argument("--engine-url", help="one idle engine's /v1 base URL to measure")
    e.add_argument("--model", default="default", help="the engine's model name")
    e.add_argument("--api-key")
    e.add_argument("--prefill-ms-per-token", type=float)
    e.add_argument("--decode-ms-per-step", type=float)
    e.add_argument("--decode-batch-factor", type=float, default=0.01)
    e.add_argument("--max-num-seqs", type=int, default=256)
    e.add_argument("--kv-transfer-ms-per-token", type=float, default=0.0025)
    e.add_argument("--kv-cache-tokens", type=int)
    e.add_argument("--request-overhead-ms", type=float, default=0.0,
                   help="an engine's time per request beyond its compute")  # fmt: skip
    p.add_argument("--json", type=Path, help="write the result JSON here ('-' = stdout)")
    p.set_defaults(func=run)


def _speed(args: argparse.Namespace) -> EngineSpeed:
    """The engine's speed: measured at ``--engine-url``, or as the flags give it."""
    speed: EngineSpeed | argparse.Namespace = args
    if args.engine_url:
        speed = asyncio.run(probe_engine(args.engine_url, args.model, api_key=args.api_key))
    elif args.prefill_ms_per_token is None or args.decode_ms_per_step is None:
        raise InvalidRequest(
            "give --engine-url, or --prefill-ms-per-token and --decode-ms-per-step"
        )
    return EngineSpeed(
        prefill_ms_per_token=speed.prefill_ms_per_token,
        decode_ms_per_step=speed.decode_ms_per_step,
        decode_batch_factor=speed.decode_batch_factor,
        request_overhead_ms=speed.request_overhead_ms,
        max_num_seqs=args.max_num_seqs,
        kv_transfer_ms_per_token=args.kv_transfer_ms_per_token,
        kv_cache_tokens=args.kv_cache_tokens,
    )


def _table(plan: dict[str, object]) -> str:
    e = plan["engine"]
    assert isinstance(e, dict)
    rows = [
        ("engine prefill", f"{e['prefill_ms_per_token']:.4f} ms/token"),
        ("engine request overhead", f"{e['request_overhead_ms']:.1f} ms"),
        ("engine decode step", f"{e['decode_ms_per_step']:.2f} ms "
                               f"(+{e['decode_batch_factor']:.4f} per sequence)"),
        ("prefill engines", str(plan.get("prefill_engines"))),
        ("decode engines", str(plan.get("decode_engines"))),
        ("total engines", str(plan.get("total_engines"))),
        ("prefill utilisation", str(plan.get("prefill_utilization", "-"))),
        ("decode batch per engine", str(plan.get("decode_batch", "-"))),
        ("predicted TTFT (quantile)", f"{plan.get('predicted_ttft_ms', '-')} ms"),
        ("predicted ITL", f"{plan.get('predicted_itl_ms', '-')} ms"),
    ]  # fmt: skip
    lines = [f"{k:<28} {v}" for k, v in rows]
    if plan.get("note"):
        lines.append(f"note: {plan['note']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the sizing (or its JSON). Errors return 2."""
    try:
        workload = PdWorkload(
            rate=args.rate,
            prompt_tokens=args.prompt_tokens,
            output_tokens=args.output_tokens,
            cached_fraction=args.cached_fraction,
            cold_fraction=args.cold_fraction,
            ttft_ms=args.ttft_ms,
            itl_ms=args.itl_ms,
            quantile=args.quantile,
            service_cv=args.service_cv,
        )
        plan = size_pd(workload, _speed(args))
    except (FleetgateError, OSError) as exc:
        print(f"fleetgate plan pd: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 2
    print_result(plan, lambda: _table(plan), args.json)
    return 0
