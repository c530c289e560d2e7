"""Can the load generator hold its schedule? fleetgate bench against GuideLLM, same upstream.

Starts an instant OpenAI-compatible upstream (aiohttp on uvloop, ``--upstream-processes``
processes sharing the port with SO_REUSEPORT), then in the same run:

1. ``fleetgate bench``: open loop, constant ``--rate`` req/s for ``--seconds`` s, streaming,
   ``--processes`` client processes; reports achieved send rate and schedule lag percentiles
   (target: p99 lag <= 2 ms at 5,000 req/s for 20 s);
2. GuideLLM (0.8 CLI, ``guidellm run``; already installed in the virtualenv ``--venv``, default
   /tmp/guidellm-venv: ``python -m venv /tmp/guidellm-venv && /tmp/guidellm-venv/bin/pip install
   guidellm``) at the same constant rate and duration against the same upstream, with synthetic
   8-token prompts cut by a tiny byte-level BPE tokenizer trained here (no hub downloads,
   ``HF_HUB_OFFLINE=1``); its JSON report gives completed/errored/cancelled counts and per-request
   ``targeted_start``/``request_start``, from which its send rate and schedule lag are computed
   the same way as fleetgate's.

Prints both side by side and the ratio of achieved send rates. Raw results go to ``--out``
(default /tmp/loadgen_vs_guidellm.json); ``--write-docs`` replaces the "Load generator vs
GuideLLM" section of docs/results/benchmarks.md (and nothing else).

    .venv/bin/python bench/loadgen_vs_guidellm.py --write-docs               # full run
    .venv/bin/python bench/loadgen_vs_guidellm.py --rate 500 --seconds 5     # short check
    .venv/bin/python bench/loadgen_vs_guidellm.py --rate 200 --seconds 2 --skip-guidellm
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from fleetgate.bench import LoadPoint, PointOptions, Target, run_point, synthetic
from fleetgate.bench.lengths import parse_length_dist

_CHUNK = (
    b'data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
    b'"delta":{"content":" ok"},"finish_reason":"stop"}]}\n\n'
    b'data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[],'
    b'"usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}}\n\ndata: [DONE]\n\n'
)
_WHOLE = (
    b'{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":'
    b'{"role":"assistant","content":"ok"},"text":"ok","finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}}'
)


def _upstream(port: int) -> None:
    import uvloop
    from aiohttp import web

    async def complete(request: web.Request) -> web.StreamResponse:
        try:
            body = await request.read()
        except ConnectionResetError:  # a client cancelled it (GuideLLM at its window's end)
            return web.Response(status=499)
        if b'"stream":true' not in body.replace(b" ", b""):
            return web.Response(body=_WHOLE, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_CHUNK)
        await resp.write_eof()
        return resp

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", complete)
        app.router.add_post("/v1/completions", complete)
        app.router.add_get("/v1/models", models)
        app.router.add_get("/health", models)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, reuse_port=True, backlog=4096).start()
        while True:
            await __import__("asyncio").sleep(3600)

    uvloop.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_fleetgate(url: str, rate: float, seconds: float, processes: int) -> dict[str, Any]:
    n = int(rate * seconds)
    specs = synthetic(n, parse_length_dist("fixed:8"), parse_length_dist("fixed:1"))
    opts = PointOptions(target=Target(url, model="m"), pool=specs, processes=processes)
    res = run_point(opts, LoadPoint("rate", rate, n, duration=seconds, arrival="constant"))
    s = res.summary
    sent = sorted(r.sent for r in res.records)
    span = (sent[-1] - sent[0]) if len(sent) > 1 else 1.0
    return {
        "tool": "fleetgate bench",
        "requested_rate": rate,
        "sent": s["sent"],
        "completed": s["completed"],
        "failed": s["failed"],
        "achieved_send_rate": (len(sent) - 1) / span if span > 0 else 0.0,
        "request_throughput": s["request_throughput"],
        "p50_schedule_lag_ms": s["p50_schedule_lag_ms"],
        "p99_schedule_lag_ms": s["p99_schedule_lag_ms"],
        "max_schedule_lag_ms": s["max_schedule_lag_ms"],
        "p99_e2el_ms": s["p99_e2el_ms"],
    }


def _tokenizer(out: Path) -> Path:
    """A tiny byte-level BPE tokenizer on disk that ``AutoTokenizer.from_pretrained`` loads.

    GuideLLM's synthetic data needs a tokenizer to cut prompts to a token count; nothing may be
    downloaded, so one is trained here on a few sentences (byte-level, so any text encodes).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if (out / "tokenizer.json").exists() and (out / "tokenizer_config.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    words = (
        "the quick brown fox jumps over a lazy dog while two load generators send requests "
        "at a constant rate to an instant upstream and measure how late each send was"
    ).split()
    corpus = [" ".join(words[i:] + words[:i]) for i in range(len(words))]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    special = "<|endoftext|>"
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": special,
        "eos_token": special,
        "unk_token": special,
        "model_max_length": 1_000_000,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


def guidellm_command(
    exe: Path, url: str, rate: float, seconds: float, tokenizer: Path, out: Path
) -> list[str]:
    """``guidellm run`` (GuideLLM 0.8 CLI): constant rate, synthetic 8-token prompts and
    1-token outputs (the same shape fleetgate bench sends), streaming chat completions."""
    target = url.removesuffix("/v1")
    return [
        str(exe),
        "run",
        "--backend",
        f"kind=openai_http,target={target},model=m",
        "--profile",
        f"kind=constant,rate={rate:g}",
        "--constraint",
        f"kind=max_duration,seconds={seconds:g}",
        "--data",
        "kind=synthetic_text,prompt_tokens=8,output_tokens=1",
        "--tokenizer",
        f"kind=hf_auto,model={tokenizer}",
        "--metrics",
        "kind=generative,sample_size=0",
        "--output",
        f"kind=json,path={out}",
        "--disable-progress",
    ]


def _dist_ms(metric: dict[str, Any] | None) -> dict[str, float]:
    """p50/p99/max (ms) of one GuideLLM distribution (``{"percentiles": ..., "max": ...}``)."""
    if not metric or not metric.get("count"):
        return {}
    pct = metric.get("percentiles") or {}
    return {
        "p50": float(pct.get("p50", 0.0)) * 1000.0,
        "p99": float(pct.get("p99", 0.0)) * 1000.0,
        "max": float(metric.get("max", 0.0)) * 1000.0,
    }


def parse_guidellm(report: dict[str, Any]) -> dict[str, Any]:
    """The numbers compared here, from GuideLLM's JSON report (first benchmark).

    Send rate and schedule lag are recomputed from every request's own timings
    (``request_start`` and ``targeted_start``, GuideLLM's ``request_dispatch_delay``), over
    all requests that were started, so they are defined like fleetgate's.
    """
    bench = report["benchmarks"][0]
    made = bench["scheduler_metrics"]["requests_made"]
    metrics = bench["metrics"]
    starts: list[float] = []
    lags: list[float] = []
    for group in ("successful", "errored", "incomplete"):
        for req in (bench.get("requests") or {}).get(group) or []:
            timings = (req.get("info") or {}).get("timings") or {}
            start, target = timings.get("request_start"), timings.get("targeted_start")
            if start is None:
                continue
            starts.append(float(start))
            if target is not None:
                lags.append(float(start) - float(target))
    starts.sort()
    span = starts[-1] - starts[0] if len(starts) > 1 else 0.0
    lags.sort()

    def pct(q: float) -> float:
        return lags[min(len(lags) - 1, int(q * len(lags)))] * 1000.0 if lags else float("nan")

    rps = (metrics.get("requests_per_second") or {}).get("successful") or {}
    return {
        "guidellm_version": report.get("metadata", {}).get("guidellm_version"),
        "worker_processes": bench["scheduler_state"].get("num_processes"),
        "measured_s": bench.get("duration"),
        "completed": made["successful"],
        "failed": made["errored"],
        "incomplete": made["incomplete"],
        "sent": len(starts),
        "achieved_send_rate": (len(starts) - 1) / span if span > 0 else 0.0,
        "requests_per_second_mean": rps.get("mean"),
        "p50_schedule_lag_ms": pct(0.50),
        "p99_schedule_lag_ms": pct(0.99),
        "max_schedule_lag_ms": lags[-1] * 1000.0 if lags else float("nan"),
        "dispatch_delay_ms_successful": _dist_ms(
            (metrics.get("request_dispatch_delay") or {}).get("successful")
        ),
        "e2el_ms_successful": _dist_ms((metrics.get("request_latency") or {}).get("successful")),
    }


def _run_guidellm(url: str, rate: float, seconds: float, venv: Path) -> dict[str, Any]:
    exe = venv / "bin" / "guidellm"
    result: dict[str, Any] = {"tool": "guidellm", "requested_rate": rate}
    if not exe.exists():
        result["error"] = f"{exe} not found: pip install guidellm into {venv} first"
        return result
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "loadgen_vs_guidellm"
    out = work / "guidellm.json"
    out.unlink(missing_ok=True)
    cmd = guidellm_command(exe, url, rate, seconds, _tokenizer(work / "tokenizer"), out)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = work / "guidellm.log"
    t0 = time.perf_counter()
    with log.open("w") as sink:
        proc = subprocess.run(
            cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, timeout=seconds * 6 + 300
        )
    result |= {
        "wall_s": time.perf_counter() - t0,
        "returncode": proc.returncode,
        "command": " ".join(cmd),
        "log": str(log),
    }
    if proc.returncode != 0 or not out.exists():
        result["error"] = log.read_text()[-3000:]
        return result
    result |= parse_guidellm(orjson.loads(out.read_bytes()))
    return result


def _machine() -> str:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = Path("/proc/meminfo").read_text().split()[1]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return (
        f"cpu {cpu}, cores {os.cpu_count()}, memory {int(mem_kib) / 2**20:.0f} GiB, "
        f"kernel {platform.release()}, python {platform.python_version()}, commit {commit}"
    )


def _fmt(value: Any, digits: int = 2) -> str:
    if isinstance(value, int | float) and value == value:  # not NaN
        return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"
    return "n/a"


def _table(results: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| tool | asked req/s | sent | send rate req/s | completed | failed | cancelled "
        "| lag p50 ms | lag p99 ms | lag max ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['tool']} | {r['requested_rate']:,.0f} | failed to run |||||||||")
            continue
        rows.append(
            f"| {r['tool']} | {r['requested_rate']:,.0f} | {_fmt(r['sent'])} "
            f"| {_fmt(r['achieved_send_rate'], 0)} | {_fmt(r['completed'])} "
            f"| {_fmt(r['failed'])} | {_fmt(r.get('incomplete', 0))} "
            f"| {_fmt(r['p50_schedule_lag_ms'], 3)} | {_fmt(r['p99_schedule_lag_ms'], 3)} "
            f"| {_fmt(r['max_schedule_lag_ms'], 1)} |"
        )
    return rows


HEADING = "## Load generator vs GuideLLM"


def section(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The ``## Load generator vs GuideLLM`` section of docs/results/benchmarks.md."""
    fg = results[0]
    lines = [
        HEADING,
        "",
        "Can `fleetgate bench` hold an open-loop schedule? It and GuideLLM are pointed, in the "
        "same run and one after the other, at the same instant upstream (aiohttp on uvloop, "
        f"{args.upstream_processes} processes on one SO_REUSEPORT port, one SSE chunk plus a "
        "usage chunk per request) at the same constant rate for the same duration, with 8-token "
        "prompts and 1-token streaming chat completions. Schedule lag is actual send time "
        "minus scheduled send time per request (GuideLLM: `request_start - targeted_start`, its "
        "`request_dispatch_delay`, over every request it started); send rate is "
        "(sent - 1) / (last send - first send). The upstream, both load generators, and "
        "everything else run on the same 2 CPU cores, so neither tool has the machine to itself "
        "and the absolute numbers are a floor for what either does on a larger box. Reproduce "
        "with `.venv/bin/python bench/loadgen_vs_guidellm.py --write-docs` (GuideLLM in "
        f"`{args.venv}`; raw results in `{args.out}`).",
        "",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- Machine: {_machine()}",
        f"- Command: `.venv/bin/python bench/loadgen_vs_guidellm.py --rate {args.rate:g} "
        f"--seconds {args.seconds:g} --processes {args.processes} "
        f"--upstream-processes {args.upstream_processes} --write-docs`",
        f"- fleetgate bench: {args.processes} client processes",
        "- Load average (1/5/15 min) just before the run, other work on the box included: "
        + "/".join(f"{x:.2f}" for x in args.load_before),
    ]
    if len(results) > 1 and "error" not in results[1]:
        gl = results[1]
        lines.append(
            f"- GuideLLM {gl['guidellm_version']} ({gl['worker_processes']} worker processes, its "
            f"default): `{_redact(gl['command'])}`"
        )
    lines += ["", *_table(results), ""]
    verdict = "held" if fg["p99_schedule_lag_ms"] <= 2.0 and fg["failed"] == 0 else "missed"
    lines.append(
        f"fleetgate bench {verdict} the target (p99 schedule lag <= 2 ms, no failures) at "
        f"{args.rate:,.0f} req/s for {args.seconds:g} s."
    )
    if len(results) > 1 and "error" not in results[1]:
        gl = results[1]
        ratio = fg["achieved_send_rate"] / gl["achieved_send_rate"] if gl["sent"] > 1 else 0.0
        lines.append(
            f"GuideLLM sent {gl['sent']:,} requests at {gl['achieved_send_rate']:,.0f} req/s "
            f"(fleetgate {fg['sent']:,} at {fg['achieved_send_rate']:,.0f} req/s, "
            f"{ratio:.2f}x), completed {gl['completed']:,} with {gl['failed']:,} errors and "
            f"{gl['incomplete']:,} cancelled (GuideLLM queues requests ahead of their send "
            f"time and cancels those still queued or in flight when the window closes); its own "
            f"requests_per_second mean (successful) was "
            f"{_fmt(gl['requests_per_second_mean'], 0)}."
        )
    if args.note:
        lines.append(args.note)
    return "\n".join(lines) + "\n"


def _redact(cmd: str) -> str:
    """The GuideLLM command with this run's temporary port and paths made generic."""
    out = []
    for part in cmd.split(" "):
        if part.endswith("/bin/guidellm"):
            part = "guidellm"
        out.append(part)
    return " ".join(out)


def update_docs(path: Path, text: str) -> None:
    """Replace this section of ``path`` (or append it); every other byte stays as it was."""
    doc = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = doc.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip("\n") == HEADING), None)
    if start is None:
        path.write_text(doc.rstrip("\n") + "\n\n" + text)
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), None)
    tail = "".join(lines[end:]) if end is not None else ""
    path.write_text("".join(lines[:start]) + text + ("\n" + tail if tail else ""))


def _print(results: list[dict[str, Any]]) -> None:
    print("\n".join(_table(results)))
    for r in results[1:]:
        if "error" in r:
            print(f"{r['tool']}: failed (rc {r.get('returncode')}):\n{r['error']}")
            continue
        print(f"guidellm command: {r['command']}")
        print(
            f"guidellm: requests_per_second mean (successful) {_fmt(r['requests_per_second_mean'])}"
            f", dispatch delay (successful) ms {r['dispatch_delay_ms_successful']}, "
            f"e2e latency (successful) ms {r['e2el_ms_successful']}, wall {r['wall_s']:.1f} s"
        )
        if r["sent"] > 1:
            ratio = results[0]["achieved_send_rate"] / r["achieved_send_rate"]
            print(f"ratio fleetgate/guidellm achieved send rate: {ratio:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rate", type=float, default=5000.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--processes", type=int, default=1, help="fleetgate client processes")
    ap.add_argument("--upstream-processes", type=int, default=1)
    ap.add_argument("--skip-guidellm", action="store_true")
    ap.add_argument("--venv", type=Path, default=Path("/tmp/guidellm-venv"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/loadgen_vs_guidellm.json"))
    ap.add_argument("--write-docs", action="store_true", help="update docs/results/benchmarks.md")
    ap.add_argument(
        "--docs",
        type=Path,
        default=Path(__file__).parent.parent / "docs" / "results" / "benchmarks.md",
    )
    ap.add_argument("--note", default="", help="a sentence to add to the docs section")
    args = ap.parse_args()
    args.load_before = os.getloadavg()
    port = _free_port()
    ctx = mp.get_context("spawn")
    ups = [
        ctx.Process(target=_upstream, args=(port,), daemon=True)
        for _ in range(args.upstream_processes)
    ]
    for p in ups:
        p.start()
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(100):  # wait for the upstream to listen
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        results = [_run_fleetgate(url, args.rate, args.seconds, args.processes)]
        if not args.skip_guidellm:
            results.append(_run_guidellm(url, args.rate, args.seconds, args.venv))
    finally:
        for p in ups:
            p.terminate()
            p.join(5)
    args.out.write_text(json.dumps(results, indent=2))
    _print(results)
    fg = results[0]
    ok = fg["p99_schedule_lag_ms"] <= 2.0 and fg["failed"] == 0
    print("PASS" if ok else "FAIL", "(fleetgate bench: p99 schedule lag <= 2 ms, no failures)")
    if args.write_docs:
        update_docs(args.docs, section(results, args))
        print(f"wrote {HEADING!r} in {args.docs}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
