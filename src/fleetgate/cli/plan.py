"""``fleetgate plan``: size a fleet from traffic, typed-in or benched per-GPU throughput.

Example (the 1M-DAU worked example)::

    fleetgate plan --dau 1000000 --conversations 3 --turns 5 --active-hours 8 --peak-factor 3 \\
        --input-tokens 2000 --output-tokens 500 --gpu-tokens-per-s 4000 --gpu-price 3 \\
        --round-gpus-to 100
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from fleetgate.bench.slo import parse_slo
from fleetgate.cli import forecast, plan_pd
from fleetgate.cli.output import print_result
from fleetgate.cli.parsers import add_command
from fleetgate.errors import FleetgateError, InvalidRequest
from fleetgate.extras import require
from fleetgate.plan import PlanInputs, calibrate, make_plan, plan_table, plot_plan

__all__ = ["register", "run"]

PLOT_PURPOSE = "plotting the plan (--plot)"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``plan`` sub-command."""
    p = add_command(sub, "plan", "capacity plan: traffic -> QPS -> GPUs -> cost", __doc__)
    p.add_argument("--dau", type=float, help="daily active users (required without a sub-command)")
    p.add_argument("--conversations", type=float, default=3.0, help="per user per day")
    p.add_argument("--turns", type=float, default=5.0, help="requests per conversation")
    p.add_argument("--active-hours", type=float, default=8.0)
    p.add_argument("--peak-factor", type=float, default=3.0)
    p.add_argument("--input-tokens", type=float, default=2000.0)
    p.add_argument("--output-tokens", type=float, default=500.0)
    p.add_argument(
        "--gpu-tokens-per-s",
        type=float,
        default=4000.0,
        help="per-GPU input+output tokens/s (or use --from-bench)",
    )
    p.add_argument("--from-bench", type=Path, help="bench result JSON to calibrate from")
    p.add_argument("--bench-gpus", type=int, default=1, help="GPUs behind the benched URL")
    p.add_argument("--slo", help="SLO the benched point must meet, e.g. ttft_p95_ms=500")
    p.add_argument("--gpu-price", type=float, default=3.0, help="$ per GPU-hour")
    p.add_argument("--redundancy", type=float, default=1.0)
    p.add_argument("--round-gpus-to", type=int, default=1)
    p.add_argument("--hours-per-month", type=float, default=720.0)
    p.add_argument("--diurnal", help="24 comma-separated hourly weights")
    p.add_argument("--autoscale-headroom", type=float, default=1.2)
    p.add_argument("--min-gpus", type=int, default=1)
    p.add_argument("--ttft-p95-ms", type=float, help="TTFT P95 target for queueing sizing")
    p.add_argument("--base-ttft-p95-ms", type=float, default=200.0)
    p.add_argument("--slots-per-gpu", type=int, default=64)
    p.add_argument("--prefill-tps-per-gpu", type=float)
    p.add_argument("--decode-tps-per-gpu", type=float)
    p.add_argument("--json", type=Path, help="write the plan JSON here ('-' = stdout)")
    p.add_argument("--plot", type=Path, help="write a PNG plot here")
    p.set_defaults(func=run)
    subs = p.add_subparsers(dest="plan_command", metavar="SUBCOMMAND")
    forecast.register(subs)
    plan_pd.register(subs)


def build_inputs(args: argparse.Namespace) -> PlanInputs:
    """``PlanInputs`` from the flags, calibrated from ``--from-bench`` when given."""
    diurnal = None
    if args.diurnal:
        try:
            diurnal = [float(x) for x in args.diurnal.split(",")]
        except ValueError as exc:
            raise InvalidRequest("--diurnal takes 24 numbers", param="diurnal") from exc
    gpu_tps, base_ttft, slots = args.gpu_tokens_per_s, args.base_ttft_p95_ms, args.slots_per_gpu
    service_s: float | None = None
    service_cv: float | None = None
    ttft_std = 0.0
    full_s: float | None = None
    if args.from_bench:
        cal = calibrate(
            orjson.loads(args.from_bench.read_bytes()),
            gpus=args.bench_gpus,
            slo=parse_slo(args.slo) if args.slo else None,
        ).scaled_to(args.input_tokens + args.output_tokens)
        gpu_tps, base_ttft = cal.gpu_tokens_per_s, cal.base_ttft_p95_ms
        slots, service_s = cal.slots_per_gpu, cal.service_time_s
        service_cv, ttft_std = cal.service_cv, cal.base_ttft_std_ms
        full_s = cal.service_full_s
    return PlanInputs(
        dau=args.dau,
        conversations_per_user=args.conversations,
        turns_per_conversation=args.turns,
        active_hours=args.active_hours,
        peak_factor=args.peak_factor,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        gpu_tokens_per_s=gpu_tps,
        gpu_price_per_hour=args.gpu_price,
        redundancy=args.redundancy,
        round_gpus_to=args.round_gpus_to,
        hours_per_month=args.hours_per_month,
        diurnal=diurnal,
        autoscale_headroom=args.autoscale_headroom,
        min_gpus=args.min_gpus,
        ttft_p95_target_ms=args.ttft_p95_ms,
        base_ttft_p95_ms=base_ttft,
        slots_per_gpu=slots,
        service_time_s=service_s,
        service_cv=service_cv,
        service_time_full_s=full_s,
        base_ttft_std_ms=ttft_std,
        prefill_tokens_per_s_per_gpu=args.prefill_tps_per_gpu,
        decode_tokens_per_s_per_gpu=args.decode_tps_per_gpu,
    )


def run(args: argparse.Namespace) -> int:
    """Print the plan table; write JSON and the plot when asked. Errors return 2."""
    try:
        if args.dau is None:
            raise InvalidRequest("--dau is required (or use `fleetgate plan forecast`)")
        if args.plot:  # before any output: say now that the plot cannot be drawn
            require("matplotlib", extra="bench", purpose=PLOT_PURPOSE)
        plan = make_plan(build_inputs(args))
        if print_result(plan, lambda: plan_table(plan), args.json) and args.plot:
            plot_plan(plan, args.plot)
        return 0
    except (FleetgateError, OSError) as exc:
        print(f"fleetgate plan: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 2
