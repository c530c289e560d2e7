"""Can the load generator hold its schedule? fleetgate bench against GuideLLM, same upstream.

Starts an instant OpenAI-compatible upstream (aiohttp on uvloop, ``--upstream-processes``
processes sharing the port with SO_REUSEPORT), then in the same run:

1. ``fleetgate bench``: open loop, constant ``--rate`` req/s for ``--seconds`` s, streaming,
   ``--processes`` client processes; reports achieved send rate and schedule lag percentiles
   (target: p99 lag <= 2 ms at 5,000 req/s for 20 s);
2. GuideLLM, installed into a throwaway virtualenv under /tmp (``pip install guidellm``), at the
   same constant rate against the same upstream; reports its achieved request rate.

Prints both side by side and the ratio of achieved rates. Writes nothing into the repository
(results go to ``--out``, default /tmp/loadgen_vs_guidellm.json).

    PYTHONPATH=src .venv/bin/python bench/loadgen_vs_guidellm.py            # full run
    PYTHONPATH=src .venv/bin/python bench/loadgen_vs_guidellm.py --rate 200 --seconds 2 \\
        --skip-guidellm                                                      # smoke test
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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
        body = await request.read()
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


def _guidellm_venv(root: Path) -> Path:
    py = root / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "guidellm"], check=True)
    return root / "bin" / "guidellm"


def _find(obj: Any, key: str) -> Any:
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            found = _find(v, key)
            if found is not None:
                return found
    elif isinstance(obj, list):
        for v in obj:
            found = _find(v, key)
            if found is not None:
                return found
    return None


def _run_guidellm(url: str, rate: float, seconds: float, venv: Path) -> dict[str, Any]:
    exe = _guidellm_venv(venv)
    data = venv / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": "say ok " * 4}) + "\n" for _ in range(64)))
    out = venv / "guidellm.json"
    cmd = [
        str(exe),
        "benchmark",
        "--target",
        url.removesuffix("/v1"),
        "--model",
        "m",
        "--rate-type",
        "constant",
        "--rate",
        str(rate),
        "--max-seconds",
        str(seconds),
        "--data",
        str(data),
        "--output-path",
        str(out),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GUIDELLM__ENV": "prod"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds * 6 + 300)
    wall = time.perf_counter() - t0
    result: dict[str, Any] = {
        "tool": "guidellm",
        "requested_rate": rate,
        "wall_s": wall,
        "returncode": proc.returncode,
    }
    if proc.returncode != 0 or not out.exists():
        result["error"] = (proc.stderr or proc.stdout)[-2000:]
        return result
    report = json.loads(out.read_text())
    rps = _find(report, "requests_per_second")
    result["requests_per_second"] = rps.get("successful", rps) if isinstance(rps, dict) else rps
    result["command"] = " ".join(cmd)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rate", type=float, default=5000.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--processes", type=int, default=2, help="fleetgate client processes")
    ap.add_argument("--upstream-processes", type=int, default=2)
    ap.add_argument("--skip-guidellm", action="store_true")
    ap.add_argument("--venv", type=Path, default=Path("/tmp/guidellm-venv"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/loadgen_vs_guidellm.json"))
    args = ap.parse_args()
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
    fg = results[0]
    print(
        f"fleetgate bench: asked {fg['requested_rate']:.0f} req/s, sent at "
        f"{fg['achieved_send_rate']:.0f} req/s, completed {fg['completed']}/{fg['sent']}, "
        f"schedule lag p50 {fg['p50_schedule_lag_ms']:.3f} ms, "
        f"p99 {fg['p99_schedule_lag_ms']:.3f} ms, max {fg['max_schedule_lag_ms']:.2f} ms"
    )
    ok = fg["p99_schedule_lag_ms"] <= 2.0 and fg["failed"] == 0
    if len(results) > 1:
        gl = results[1]
        if "error" in gl:
            print(f"guidellm: failed (rc {gl['returncode']}):\n{gl['error']}")
        else:
            rps = gl["requests_per_second"]
            mean = rps.get("mean") if isinstance(rps, dict) else rps
            print(f"guidellm: asked {gl['requested_rate']:.0f} req/s, achieved {mean} req/s")
            if isinstance(mean, int | float) and mean:
                print(
                    f"ratio fleetgate/guidellm achieved rate: {fg['request_throughput'] / mean:.2f}"
                )
    print("PASS" if ok else "FAIL", "(p99 schedule lag <= 2 ms, no failures)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
