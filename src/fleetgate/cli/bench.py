"""``fleetgate bench URL`` (load test) and ``fleetgate bench compare A.json B.json``.

Examples (against ``make run``'s gateway; the key is ``--api-key``, else
``$FLEETGATE_MASTER_KEY``, else ``$OPENAI_API_KEY``)::

    fleetgate bench http://127.0.0.1:4000/v1 --model fast-small --rate 50 --duration 30
    fleetgate bench http://127.0.0.1:4000/v1 --model fast-small --steps 10,50,100 \\
        --step-duration 20 --html report.html
    fleetgate bench http://127.0.0.1:4000/v1 --model fast-small --search rate \\
        --slo ttft_p95_ms=500,tpot_p95_ms=50
    fleetgate bench compare before.json after.json

A run whose first 20 answers all failed stops there and exits 2, naming the most common error.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from fleetgate.bench import (
    LoadPoint,
    PointOptions,
    PointResult,
    ProfileResult,
    Target,
    compare,
    format_comparison,
    load_azure,
    load_jsonl,
    load_mooncake,
    load_sharegpt,
    make_progress,
    parse_length_dist,
    parse_slo,
    profile_json,
    search,
    stepped,
    sweep,
    synthetic,
    write_csv,
    write_html,
    write_json,
)
from fleetgate.bench.metrics import RATE_FIELDS
from fleetgate.bench.point import checked_point
from fleetgate.bench.spec import RequestSpec
from fleetgate.errors import FleetgateError, InvalidRequest
from fleetgate.extras import require

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``bench`` sub-command."""
    p = sub.add_parser(
        "bench",
        help="load-test an OpenAI-compatible endpoint",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", nargs="+", help="base URL (…/v1), or: compare A.json B.json")
    p.add_argument("--model", help="model name (default: the first of GET {URL}/models)")
    p.add_argument(
        "--api-key",
        default=os.environ.get("FLEETGATE_MASTER_KEY") or os.environ.get("OPENAI_API_KEY"),
        help="the key sent (default: $FLEETGATE_MASTER_KEY, else $OPENAI_API_KEY)",
    )
    p.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    d = p.add_argument_group("dataset")
    d.add_argument(
        "--dataset",
        default="synthetic",
        choices=["synthetic", "jsonl", "sharegpt", "mooncake", "azure"],
    )
    d.add_argument("--dataset-path", type=Path)
    d.add_argument("--input-len", default="fixed:256", help="N, uniform:A-B, normal:MEAN,STD")
    d.add_argument("--output-len", default="fixed:64")
    d.add_argument("--prefix-groups", type=int, default=0)
    d.add_argument("--prefix-len", type=int, default=0)
    d.add_argument("--stream-ratio", type=float, default=1.0, help="0 = no streaming")
    d.add_argument("--trace-speedup", type=float, default=1.0)
    lp = p.add_argument_group("load (one of)")
    lp.add_argument("--rate", type=float, help="open loop, requests/s (inf = all at once)")
    lp.add_argument("--arrival", choices=["constant", "poisson", "gamma"], default="poisson")
    lp.add_argument("--burstiness", type=float, default=1.0)
    lp.add_argument("--concurrency", type=int, help="closed loop users")
    lp.add_argument("--steps", help="comma-separated rates, each for --step-duration")
    lp.add_argument("--sweep", type=int, metavar="N", help="sweep with N points")
    lp.add_argument("--search", choices=["rate", "concurrency"], help="goodput search")
    lp.add_argument("--trace", action="store_true", help="replay the trace's timestamps")
    lp.add_argument("--step-duration", type=float, default=30.0)
    lp.add_argument("--search-start", type=float, default=1.0)
    lp.add_argument("--search-iterations", type=int, default=6)
    lp.add_argument("--saturation-concurrency", type=int, default=256)
    b = p.add_argument_group("bounds and output")
    b.add_argument("--num-requests", type=int, default=1000)
    b.add_argument("--duration", type=float, help="stop sending after this many seconds")
    b.add_argument("--soak-window", type=float, help="per-window summaries every N s (soak)")
    b.add_argument("--slo", help="e.g. ttft_p95_ms=500,tpot_p95_ms=50,e2el_p99_ms=5000")
    b.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="vLLM-style ttft:500 ...")
    b.add_argument("--processes", type=int, default=1)
    b.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    b.add_argument("--drain", type=float, default=30.0)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--ignore-eos", action="store_true")
    b.add_argument(
        "--continuous-usage",
        action="store_true",
        help="ask vLLM for usage on every chunk (exact per-token ITL)",
    )
    b.add_argument("--extra-body", type=orjson.loads, default=None)
    b.add_argument("--label")
    b.add_argument("--output-json", type=Path)
    b.add_argument("--output-csv", type=Path)
    b.add_argument("--html", type=Path)
    b.add_argument("--save-detailed", action="store_true")
    b.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run)


def _dataset(args: argparse.Namespace) -> list[RequestSpec]:
    n = args.num_requests
    if args.dataset == "synthetic":
        return synthetic(
            n,
            parse_length_dist(args.input_len),
            parse_length_dist(args.output_len),
            seed=args.seed,
            prefix_groups=args.prefix_groups,
            prefix_len=args.prefix_len,
            stream_ratio=args.stream_ratio,
        )
    path: Path | None = args.dataset_path
    if path is None:
        raise InvalidRequest(f"--dataset {args.dataset} needs --dataset-path", param="dataset")
    if args.dataset == "jsonl":
        out_len = int(parse_length_dist(args.output_len).mean)
        return load_jsonl(path, n=n, default_output_len=out_len, stream_ratio=args.stream_ratio)
    if args.dataset == "sharegpt":
        return load_sharegpt(path, n=n, stream_ratio=args.stream_ratio)
    if args.dataset == "mooncake":
        return load_mooncake(path, n=n, speedup=args.trace_speedup)
    return load_azure(path, n=n, speedup=args.trace_speedup)


def _goodput(args: argparse.Namespace) -> dict[str, float]:
    if args.goodput:
        out = {}
        for item in args.goodput:
            key, _, val = item.partition(":")
            if key not in ("ttft", "tpot", "e2el") or not val:
                raise InvalidRequest(f"bad --goodput {item!r}: use ttft:MS tpot:MS e2el:MS")
            out[key] = float(val)
        return out
    return parse_slo(args.slo).per_request_ms() if args.slo else {}


def _first_model(url: str, api_key: str | None) -> str:
    req = urllib.request.Request(url.rstrip("/") + "/models")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            data = orjson.loads(resp.read())
        return str(data["data"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise InvalidRequest(
            f"no --model given and {url}/models did not name one ({exc})", param="model"
        ) from exc


def _run_bench(args: argparse.Namespace) -> int:
    url = args.target[0]
    if args.html and (args.steps or args.sweep or args.search):
        # the page plots several points: fail now, not after the whole load test
        require("matplotlib", extra="bench", purpose="the HTML report's plots (--html)")
    if not args.model:
        args.model = _first_model(url, args.api_key)
    target = Target(
        url,
        model=args.model,
        endpoint=args.endpoint,
        api_key=args.api_key,
        ignore_eos=args.ignore_eos,
        continuous_usage=args.continuous_usage,
        extra_body=args.extra_body or {},
        timeout_s=args.timeout,
    )
    opts = PointOptions(
        target=target,
        pool=_dataset(args),
        processes=args.processes,
        drain_s=args.drain,
        seed=args.seed,
        goodput_slo_ms=_goodput(args),
        window_s=args.soak_window,
        progress=make_progress(args.quiet),
        label=args.label,
    )
    base = LoadPoint(
        "rate",
        0.0,
        max_requests=args.num_requests,
        duration=args.duration,
        arrival=args.arrival,
        burstiness=args.burstiness,
    )
    multi: ProfileResult | None = None
    if args.steps:
        rates = [float(x) for x in args.steps.split(",") if x.strip()]
        multi = stepped(opts, rates, args.step_duration, base, runner=checked_point)
    elif args.sweep:
        multi = sweep(
            opts, args.sweep, args.step_duration, base, args.saturation_concurrency,
            runner=checked_point,
        )  # fmt: skip
    elif args.search:
        if not args.slo:
            raise InvalidRequest("--search needs --slo", param="slo")
        multi = search(
            opts,
            parse_slo(args.slo),
            args.step_duration,
            base,
            dimension=args.search,
            start=args.search_start,
            iterations=args.search_iterations,
            runner=checked_point,
        )
    if multi is not None:
        data: dict[str, Any] = profile_json(multi)
        points = multi.points
        _print_points(multi)
    else:
        point = _single_point(args, base)
        res = checked_point(opts, point)
        points = [res]
        data = dict(res.summary)
        if args.save_detailed:
            data["requests"] = [r.to_row() for r in res.records]
        _print_summary(res)
    _write_outputs(args, data, points, multi)
    return 0


def _single_point(args: argparse.Namespace, base: LoadPoint) -> LoadPoint:
    if args.trace or args.dataset in ("mooncake", "azure") and args.rate is None:
        return LoadPoint("trace", 0.0, max_requests=args.num_requests, duration=args.duration)
    if args.concurrency:
        return LoadPoint(
            "concurrency",
            float(args.concurrency),
            max_requests=args.num_requests,
            duration=args.duration,
        )
    rate = args.rate if args.rate is not None else float("inf")
    return LoadPoint(
        "rate",
        rate,
        max_requests=args.num_requests,
        duration=args.duration,
        arrival=args.arrival,
        burstiness=args.burstiness,
    )


def _write_outputs(
    args: argparse.Namespace,
    data: dict[str, Any],
    points: list[PointResult],
    multi: ProfileResult | None,
) -> None:
    if args.output_json:
        write_json(args.output_json, data)
    if args.output_csv:
        write_csv(args.output_csv, points)
    if args.html:
        slo = parse_slo(args.slo) if args.slo else None
        write_html(args.html, multi or ProfileResult("single", points), slo)


def _print_summary(res: PointResult) -> None:
    s = res.summary
    keys = (
        "completed",
        "failed",
        "duration",
        *RATE_FIELDS,
        "mean_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "p99_tpot_ms",
        "mean_itl_ms",
        "p99_itl_ms",
        "p99_itl_per_token_ms",
        "mean_e2el_ms",
        "p99_e2el_ms",
        "p50_schedule_lag_ms",
        "p99_schedule_lag_ms",
        "max_schedule_lag_ms",
    )
    print("=" * 16 + " Serving Benchmark Result " + "=" * 16)
    for k in keys:
        v = s.get(k)
        if v is not None:
            print(f"{k:<40} {v:.2f}" if isinstance(v, float) else f"{k:<40} {v}")
    for err, count in s.get("errors", {}).items():
        print(f"error x{count}: {err}")


def _print_points(multi: ProfileResult) -> None:
    print(
        f"{'offered':>10} {'req/s':>9} {'p95 ttft':>9} {'p95 tpot':>9} {'p95 e2e':>9} "
        f"{'p99 lag':>8} {'failed':>6}"
    )
    for p in multi.points:
        s = p.summary
        print(
            f"{s['offered_load']:>10.2f} {s['request_throughput']:>9.2f} "
            f"{s['p95_ttft_ms']:>9.1f} {s['p95_tpot_ms']:>9.1f} {s['p95_e2el_ms']:>9.1f} "
            f"{s['p99_schedule_lag_ms']:>8.2f} {s['failed']:>6}"
        )
    if multi.best is not None:
        print(f"highest load meeting the SLO: {multi.best['offered_load']:.2f}")


def _compare(files: list[str]) -> int:
    if len(files) != 2:
        raise InvalidRequest("usage: fleetgate bench compare A.json B.json")
    a, b = (orjson.loads(Path(f).read_bytes()) for f in files)
    print(format_comparison(compare(a, b)))
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the sub-command; errors print one line and return 2."""
    try:
        if args.target[0] == "compare":
            return _compare(args.target[1:])
        if len(args.target) != 1:
            raise InvalidRequest("give exactly one base URL")
        return _run_bench(args)
    except (FleetgateError, OSError) as exc:
        print(f"fleetgate bench: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 2
