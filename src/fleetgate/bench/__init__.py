"""Load generator and reports: ``fleetgate bench`` as a library.

Talks to any OpenAI-compatible endpoint over HTTP only. Results use ``vllm bench serve`` field
names so they compare directly with vLLM's own benchmark.

Example::

    from fleetgate.bench import LoadPoint, PointOptions, Target, run_point, synthetic
    from fleetgate.bench import parse_length_dist as dist

    specs = synthetic(200, dist("fixed:128"), dist("fixed:32"))
    opts = PointOptions(target=Target("http://127.0.0.1:4000/v1", model="tiny"), pool=specs)
    summary = run_point(opts, LoadPoint("rate", 20.0, max_requests=200)).summary
    print(summary["p99_ttft_ms"], summary["p99_schedule_lag_ms"])
"""

from fleetgate.bench.client import Target, build_body, send_request
from fleetgate.bench.compare import compare, format_comparison
from fleetgate.bench.datasets import load_jsonl, load_sharegpt, synthetic
from fleetgate.bench.html_report import write_html
from fleetgate.bench.knee import knee_index
from fleetgate.bench.lengths import LengthDist, parse_length_dist
from fleetgate.bench.metrics import DEFAULT_PERCENTILES, per_token_itl, summarize, windows
from fleetgate.bench.point import LoadPoint, PointOptions, PointResult, run_point
from fleetgate.bench.procs import run_open_loop_processes
from fleetgate.bench.profiles import ProfileResult, search, stepped, sweep
from fleetgate.bench.progress import NullProgress, Progress, make_progress
from fleetgate.bench.report import profile_json, write_csv, write_json
from fleetgate.bench.runner import RunOutcome, run_closed_loop, run_open_loop, run_sync
from fleetgate.bench.schedule import arrival_offsets, offsets_for_duration, trace_offsets
from fleetgate.bench.slo import Slo, parse_slo
from fleetgate.bench.spec import RequestRecord, RequestSpec
from fleetgate.bench.traces import load_azure, load_mooncake

__all__ = [
    "DEFAULT_PERCENTILES",
    "LengthDist",
    "LoadPoint",
    "NullProgress",
    "PointOptions",
    "PointResult",
    "ProfileResult",
    "Progress",
    "RequestRecord",
    "RequestSpec",
    "RunOutcome",
    "Slo",
    "Target",
    "arrival_offsets",
    "build_body",
    "compare",
    "format_comparison",
    "knee_index",
    "load_azure",
    "load_jsonl",
    "load_mooncake",
    "load_sharegpt",
    "make_progress",
    "offsets_for_duration",
    "parse_length_dist",
    "parse_slo",
    "per_token_itl",
    "profile_json",
    "run_closed_loop",
    "run_open_loop",
    "run_open_loop_processes",
    "run_point",
    "run_sync",
    "search",
    "send_request",
    "stepped",
    "summarize",
    "sweep",
    "synthetic",
    "trace_offsets",
    "windows",
    "write_csv",
    "write_html",
    "write_json",
]
