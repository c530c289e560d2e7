"""``fleetgate plan forecast``: the gateway's own history -> forecast -> GPUs -> purchases.

Examples::

    # from the gateway's store (FLEETGATE_DATABASE_URL, or SQLite under --data-dir)
    fleetgate plan forecast --since 2026-01-01 --events events.json --months 6 \\
        --from-bench bench.json --redundancy 1.2 --current-gpus 16 --lead-time-weeks 8 \\
        --batch-size 8 --spot-share 0.2 --save forecast-2026-07.json
    # from an exported CSV, with the last month held out to measure the fit first
    fleetgate plan forecast --history history.csv --backtest
    # a month later: how far off was it, and what redundancy to use next
    fleetgate plan forecast --history history.csv --calibrate forecast-2026-07.json
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy.exc import SQLAlchemyError

from fleetgate.bench.slo import parse_slo
from fleetgate.cli.output import print_result
from fleetgate.cli.parsers import add_command
from fleetgate.config.settings import Settings
from fleetgate.errors import FleetgateError, InvalidRequest
from fleetgate.plan import PlanInputs, calibrate
from fleetgate.plan.calibration import calibration_report, saved_forecast
from fleetgate.plan.events import Event, load_plan_inputs, parse_event_flag
from fleetgate.plan.forecast import MONTH_H, fit_history, seasonal_naive, wape
from fleetgate.plan.history import (
    HourlyHistory,
    format_hour,
    parse_hour,
    read_history_csv,
    read_history_store,
    write_history_csv,
)
from fleetgate.plan.purchase import PurchasePolicy, monthly_gpus, purchase_plan
from fleetgate.store.database import Database

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``forecast`` under ``fleetgate plan``."""
    p = add_command(
        sub,
        "forecast",
        "forecast from the gateway's history, GPUs per month, purchase plan",
        __doc__,
    )
    src = p.add_argument_group("history")
    src.add_argument("--history", type=Path, help="CSV export (default: the gateway's store)")
    src.add_argument("--database-url", help="default: FLEETGATE_DATABASE_URL")
    src.add_argument("--data-dir", type=Path, help="where the SQLite store lives")
    src.add_argument("--since", help="first hour to read (ISO-8601 or epoch seconds)")
    src.add_argument("--until", help="read up to this time")
    src.add_argument("--alias", action="append", help="only these aliases (repeatable)")
    src.add_argument("--export-csv", type=Path, help="write the history read as CSV and stop")
    fc = p.add_argument_group("forecast")
    fc.add_argument("--events", type=Path, help="JSON of events and business lines")
    fc.add_argument("--event", action="append", default=[],
                    help="NAME,KIND,START,END[,MULTIPLIER] (repeatable)")  # fmt: skip
    fc.add_argument("--months", type=int, default=6, help="months (30 days) to forecast")
    fc.add_argument(
        "--backtest",
        action="store_true",
        help="hold out the last month: print the error, and seasonal-naive's",
    )
    fc.add_argument("--save", type=Path, help="write the forecast for next month's --calibrate")
    fc.add_argument("--calibrate", type=Path, help="a saved forecast to compare with the history")
    cap = p.add_argument_group("capacity (as `fleetgate plan`)")
    cap.add_argument("--gpu-tokens-per-s", type=float, default=4000.0)
    cap.add_argument("--from-bench", type=Path, help="bench result JSON to calibrate from")
    cap.add_argument("--bench-gpus", type=int, default=1)
    cap.add_argument("--slo", help="SLO the benched point must meet, e.g. ttft_p95_ms=500")
    cap.add_argument("--redundancy", type=float, default=1.0)
    cap.add_argument("--round-gpus-to", type=int, default=1)
    cap.add_argument("--prefill-tps-per-gpu", type=float, help="PD split: prefill GPUs")
    cap.add_argument("--decode-tps-per-gpu", type=float, help="PD split: decode GPUs")
    buy = p.add_argument_group("purchases")
    buy.add_argument("--current-gpus", type=int, default=0)
    buy.add_argument("--lead-time-weeks", type=float, default=8.0, help="4 to 12")
    buy.add_argument("--batch-size", type=int, default=8, help="GPUs per order, a multiple")
    buy.add_argument("--spot-share", type=float, default=0.2, help="share of peaks left to spot")
    buy.add_argument("--gpu-price", type=float, default=3.0, help="$ per owned GPU-hour")
    buy.add_argument("--spot-price", type=float, default=6.0, help="$ per spot GPU-hour")
    buy.add_argument("--now", help="when the plan is made (default: the end of the history)")
    p.add_argument("--json", type=Path, help="write the result JSON here ('-' = stdout)")
    p.set_defaults(func=run)


def _ms(value: str | None, what: str) -> int | None:
    return None if not value else parse_hour(value, what) * 3_600_000


async def _from_store(args: argparse.Namespace) -> HourlyHistory:
    settings = Settings.from_env(database_url=args.database_url, data_dir=args.data_dir)
    if settings.database_url is None and not (settings.data_dir / "fleetgate.db").exists():
        raise InvalidRequest(
            f"no gateway store under {settings.data_dir}: pass --history CSV, --data-dir or "
            "--database-url (or set FLEETGATE_DATABASE_URL)",
            param="history",
        )
    db = Database.from_url(settings.database_url, settings.data_dir)
    try:
        return await read_history_store(
            db, since_ms=_ms(args.since, "since"), until_ms=_ms(args.until, "until"),
            aliases=args.alias,
        )  # fmt: skip
    except (SQLAlchemyError, OSError) as exc:
        raise InvalidRequest(
            f"cannot read the spend table: {type(exc).__name__}: {str(exc).splitlines()[0]}",
            param="history",
        ) from None
    finally:
        await db.aclose()


def read_history(args: argparse.Namespace) -> HourlyHistory:
    """The history the flags name (CSV or store), cut to --since/--until and --alias."""
    if args.history is None:
        return asyncio.run(_from_store(args))
    history = read_history_csv(args.history)
    if args.alias:
        history = history.only(args.alias)
    first = parse_hour(args.since, "since") if args.since else history.start
    last = parse_hour(args.until, "until") if args.until else history.start + history.hours
    first, last = max(first, history.start), min(last, history.start + history.hours)
    if last <= first:
        raise InvalidRequest("--since/--until leave no hours of the history", param="since")
    return history.window(first, last - first)


def base_inputs(args: argparse.Namespace) -> PlanInputs:
    """Per-GPU figures and sizing options, as ``fleetgate plan`` takes them."""
    base = PlanInputs(
        dau=1.0, conversations_per_user=1.0, turns_per_conversation=1.0,
        gpu_tokens_per_s=args.gpu_tokens_per_s, gpu_price_per_hour=args.gpu_price,
        redundancy=args.redundancy, round_gpus_to=args.round_gpus_to,
        prefill_tokens_per_s_per_gpu=args.prefill_tps_per_gpu,
        decode_tokens_per_s_per_gpu=args.decode_tps_per_gpu,
    )  # fmt: skip
    if args.from_bench:
        try:
            result = orjson.loads(args.from_bench.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise InvalidRequest(f"{args.from_bench} is not JSON: {exc}") from exc
        cal = calibrate(result, gpus=args.bench_gpus, slo=parse_slo(args.slo) if args.slo else None)
        base = replace(base, gpu_tokens_per_s=cal.gpu_tokens_per_s)
    base.validate()
    return base


def _events(args: argparse.Namespace) -> tuple[list[Event], list[Any]]:
    events, lines = load_plan_inputs(args.events) if args.events else ([], [])
    return [*events, *(parse_event_flag(e) for e in args.event)], lines


def forecast_result(args: argparse.Namespace, history: HourlyHistory) -> dict[str, Any]:
    """Everything ``run`` prints: fit, backtest, months, purchases (and calibration)."""
    if args.months < 1:
        raise InvalidRequest("--months must be >= 1", param="months")
    events, lines = _events(args)
    base = base_inputs(args)
    policy = PurchasePolicy(
        current_gpus=args.current_gpus, lead_time_weeks=args.lead_time_weeks,
        batch_size=args.batch_size, spot_share=args.spot_share,
        gpu_price_per_hour=args.gpu_price, spot_price_per_hour=args.spot_price,
    )  # fmt: skip
    policy.validate()
    seen = {"from": format_hour(history.start), "hours": history.hours, "aliases": history.aliases}
    out: dict[str, Any] = {"history": seen}
    if args.calibrate:
        try:
            saved = orjson.loads(args.calibrate.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise InvalidRequest(f"{args.calibrate} is not JSON: {exc}") from exc
        out["calibration"] = report = calibration_report(saved, history)
        base = replace(base, redundancy=float(report["suggested_redundancy"]))
    if args.backtest:
        out["backtest"] = backtest(history, events)
    fit = fit_history(history, events)
    end = history.start + history.hours
    fc = fit.forecast(end, args.months * MONTH_H, lines)
    now = parse_hour(args.now, "now") if args.now else end
    months = monthly_gpus(fc, base)
    out["fit"] = {
        "growth_per_month": fit.growth_per_month(),
        "event_multipliers": {e.name: fit.multiplier(e) for e in events},
    }
    out["redundancy"] = base.redundancy
    out["gpu_tokens_per_s"] = base.gpu_tokens_per_s
    out["purchase"] = purchase_plan(months, policy, now=now)
    if args.save:
        data = saved_forecast(
            fc, redundancy=base.redundancy, gpu_tokens_per_s=base.gpu_tokens_per_s
        )
        args.save.write_bytes(orjson.dumps(data))
    return out


def backtest(history: HourlyHistory, events: list[Event]) -> dict[str, Any]:
    """Train on all but the last 30 days, forecast them; the error and seasonal-naive's."""
    train_h = history.hours - MONTH_H
    if train_h < 2 * 168:
        raise InvalidRequest("--backtest needs at least 30 days plus two weeks of history")
    train = history.window(history.start, train_h)
    test = history.window(history.start + train_h, MONTH_H)
    fc = fit_history(train, events).forecast(test.start, MONTH_H)
    actual = test.total("requests")
    return {
        "test_from": format_hour(test.start),
        "wape_requests": wape(fc.total("requests"), actual),
        "wape_requests_seasonal_naive": wape(
            seasonal_naive(train.total("requests"), MONTH_H), actual
        ),
    }


def render_text(out: dict[str, Any]) -> str:
    lines = [f"history: {out['history']['hours']} hours from {out['history']['from']} "
             f"({', '.join(out['history']['aliases'])})"]  # fmt: skip
    growth = ", ".join(f"{a} {g:+.1%}" for a, g in out["fit"]["growth_per_month"].items())
    lines.append(f"growth per month: {growth}")
    for name, mult in out["fit"]["event_multipliers"].items():
        lines.append(f"event {name}: x{mult:.2f}")
    if "backtest" in out:
        b = out["backtest"]
        lines.append(f"backtest (last 30 days): WAPE {b['wape_requests']:.1%}, "
                     f"seasonal-naive {b['wape_requests_seasonal_naive']:.1%}")  # fmt: skip
    if "calibration" in out:
        c = out["calibration"]
        lines.append(f"calibration {c['from']}..{c['until']}: WAPE tokens {c['wape_tokens']:.1%}, "
                     f"peak actual/forecast {c['peak_ratio']:.2f}, redundancy "
                     f"{c['redundancy']} -> {c['suggested_redundancy']}")  # fmt: skip
    lines.append(f"redundancy {out['redundancy']}, {out['gpu_tokens_per_s']:.0f} tokens/s per GPU")
    lines.append(f"{'month':<22}{'requests':>14}{'peak tok/s':>12}{'GPUs':>7}{'owned':>7}"
                 f"{'spot GPU-h':>12}{'cost $':>14}")  # fmt: skip
    for r in out["purchase"]["months"]:
        lines.append(f"{r['month']:<22}{r['requests']:>14,.0f}{r['peak_tokens_per_s']:>12,.0f}"
                     f"{r['gpus_peak']:>7}{r['owned_gpus']:>7}{r['spot_gpu_hours']:>12,.0f}"
                     f"{r['cost_usd']:>14,.0f}")  # fmt: skip
    for o in out["purchase"]["orders"]:
        late = "  LATE: ordered now, spot covers until it arrives" if o["late"] else ""
        lines.append(f"order {o['gpus']} GPUs by {o['order_by']} (arrive {o['arrives']}, "
                     f"for {o['for_month']}){late}")  # fmt: skip
    if not out["purchase"]["orders"]:
        lines.append("no purchases needed")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the forecast plan (or write the CSV export). Errors return 2."""
    try:
        history = read_history(args)
        if args.export_csv:
            args.export_csv.write_text(write_history_csv(history))
            print(f"wrote {history.hours} hours of {len(history.aliases)} aliases")
            return 0
        out = forecast_result(args, history)
        print_result(out, lambda: render_text(out), args.json, numpy=True)
        return 0
    except (FleetgateError, OSError) as exc:
        print(f"fleetgate plan forecast: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 2
