"""MCP gateway overhead: a tool call through fleetgate's ``/mcp`` against the same call direct.

Starts, as processes of their own: an MCP server written with the SDK (``echo`` over streamable
HTTP on 127.0.0.1) and ``fleetgate serve`` with that server under ``mcp:`` (tenancy on SQLite:
allow-list, limits, spend and audit rows; the safety policy's ``words`` input check on every
result). One client process (the official ``mcp`` client) holds a session to each and, in each
of ``--runs`` rounds, makes ``--calls`` sequential ``tools/call`` each way, alternating direct
and through the gateway. Prints per round the p50 and p90 of both and the ratio, then the
median over rounds.

    PYTHONPATH=src python bench/mcp/run.py                      # 5 rounds of 200 calls
    PYTHONPATH=src python bench/mcp/run.py --calls 50 --runs 3  # short check
    PYTHONPATH=src python bench/mcp/run.py --write-docs  # docs/results/benchmarks.md

Not a throughput test: one call at a time, so the numbers are the added latency per call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from fleetgate.cli.processes import free_port, stop, wait_http

MASTER = "sk-bench-master"
ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "results" / "benchmarks.md"
SECTION = "## MCP gateway"


def upstream_main(port: int) -> None:
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench")

    @server.tool()
    def echo(text: str) -> str:
        """Say it back."""
        return text

    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")


async def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


@contextlib.asynccontextmanager
async def _processes(tmp: Path) -> AsyncIterator[tuple[str, str]]:
    """(the upstream's MCP URL, the gateway's base URL)."""
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "FLEETGATE_MASTER_KEY": MASTER, "PYTHONPATH": str(ROOT / "src")}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    try:
        up_port = free_port()
        procs.append(
            subprocess.Popen([sys.executable, __file__, "upstream", str(up_port)], **quiet)
        )  # type: ignore[call-overload]
        await _wait_port(up_port, procs[-1])
        upstream = f"http://127.0.0.1:{up_port}/mcp"
        config = {
            "models": [{"alias": "tiny", "deployments": [
                {"provider": "openai", "model": "tiny", "api_base": "http://127.0.0.1:9/v1"}]}],
            "health": {"probe_interval_s": 60},
            "server": {"access_log": False},
            "safety": {"checks": {"words": {"type": "words"}},
                       "policies": {"default": {"input": ["words"]}}},
            "mcp": {"servers": {"bench": {"transport": "http", "url": upstream,
                                          "price_per_call_usd": 0.001}},
                    "access": {"teams": {"bench": ["bench__*"]}}},
        }  # fmt: skip
        path = tmp / "gateway.yaml"
        path.write_text(yaml.safe_dump(config))
        gw_port = free_port()
        procs.append(subprocess.Popen(  # type: ignore[call-overload]
            [sys.executable, "-m", "fleetgate.cli.main", "serve", "--config", str(path),
             "--port", str(gw_port), "--no-watch", "--data-dir", str(tmp / "data")],
            env=env, **quiet,
        ))  # fmt: skip
        gateway = f"http://127.0.0.1:{gw_port}"
        await asyncio.to_thread(wait_http, gateway + "/health/ready", procs[-1], 60.0)
        yield upstream, gateway
    finally:
        for proc in procs:
            stop(proc)


async def _key(gateway: str) -> str:
    headers = {"Authorization": f"Bearer {MASTER}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(f"{gateway}/admin/teams", json={"name": "bench"}) as resp:
            team = await resp.json()
        async with http.post(f"{gateway}/admin/keys", json={"team": team["id"]}) as resp:
            return str((await resp.json())["key"])


@contextlib.asynccontextmanager
async def _session(url: str, key: str | None) -> AsyncIterator[Any]:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(url, http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


async def _call(session: Any, tool: str, i: int) -> float:
    start = time.perf_counter()
    result = await session.call_tool(tool, {"text": f"hello {i}"})
    elapsed = (time.perf_counter() - start) * 1000
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content}")
    return elapsed


async def _round(direct: Any, via: Any, n: int) -> tuple[list[float], list[float]]:
    """``n`` calls each way, alternating, so both paths see the same machine state."""
    d, g = [], []
    for i in range(n):
        d.append(await _call(direct, "echo", i))
        g.append(await _call(via, "bench__echo", i))
    return d, g


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory(prefix="fg-bench-mcp-") as tmp:
        async with _processes(Path(tmp)) as (upstream, gateway):
            key = await _key(gateway)
            async with _session(upstream, None) as direct, _session(f"{gateway}/mcp", key) as via:
                await _round(direct, via, 20)  # warm-up
                rounds = []
                for r in range(args.runs):
                    d, g = await _round(direct, via, args.calls)
                    row = (_pct(d, 0.5), _pct(d, 0.9), _pct(g, 0.5), _pct(g, 0.9))
                    rounds.append(row)
                    print(f"round {r + 1}: direct p50 {row[0]:.2f} ms p90 {row[1]:.2f} ms | "
                          f"gateway p50 {row[2]:.2f} ms p90 {row[3]:.2f} ms | "
                          f"ratio p50 {row[2] / row[0]:.2f}")  # fmt: skip
    med = [statistics.median(r[i] for r in rounds) for i in range(4)]
    ratio = statistics.median(r[2] / r[0] for r in rounds)
    lines = [
        f"Median of {args.runs} rounds of {args.calls} sequential `tools/call` "
        f"({platform.processor() or platform.machine()}, {os.cpu_count()} cores, shared):",
        "",
        "| path | p50 ms | p90 ms |",
        "| --- | --- | --- |",
        f"| direct to the MCP server | {med[0]:.2f} | {med[1]:.2f} |",
        f"| through fleetgate `/mcp` | {med[2]:.2f} | {med[3]:.2f} |",
        "",
        f"Ratio gateway/direct at p50: **{ratio:.2f}x**; added p50: {med[2] - med[0]:.2f} ms "
        "(authentication, allow-list, limiter reservation and settle, the upstream session's "
        "round trip, the `words` input check on the result, spend and audit rows spooled).",
        "",
        "Where the gateway's CPU goes per call (cProfile of `fleetgate serve`, one run): about "
        "half in the SDK's client session to the upstream, a quarter in the SDK's stateless "
        "server (a transport and dispatcher per POST), a quarter in fleetgate's own checks and "
        "records.",
    ]
    return "\n".join(lines)


def write_docs(body: str) -> None:
    text = DOCS.read_text()
    block = (
        f"{SECTION} (`bench/mcp/run.py`)\n\nAdded latency of one tool call through the MCP "
        f"gateway against the same call made directly (both over streamable HTTP on "
        f"loopback, the official `mcp` client).\n\n{body}\n"
    )
    if SECTION in text:
        start = text.index(SECTION)
        nxt = text.find("\n## ", start + len(SECTION))
        text = text[:start] + block + ("\n" + text[nxt + 1 :] if nxt != -1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    DOCS.write_text(text)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "upstream":
        upstream_main(int(sys.argv[2]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--write-docs", action="store_true")
    arguments = parser.parse_args()
    summary = asyncio.run(main(arguments))
    print(summary)
    if arguments.write_docs:
        write_docs(summary)
