"""Soak: the gateway at its maximum throughput for a while, default config, SQLite and PostgreSQL.

For each store the script starts ``fleetgate sim`` (instant) and ``fleetgate serve`` with the
default config (tenancy on, access log on, spool fsync on; only the model is configured) as
processes of their own on 127.0.0.1, creates a team and a key, then drives the gateway with
closed-loop clients (``--clients`` processes x ``--concurrency`` connections, each sending the
next request as soon as the last one answered) for ``--duration`` seconds or
``--max-requests`` requests, whichever comes first. Every ``--sample-s`` it reads
``fleetgate_spend_pending_records`` and ``fleetgate_spend_memory_records`` from ``/metrics``
and the gateway's RSS from ``/proc``. After the load it waits for the spool to drain and reads
the spend report.

It prints, per store: requests sent and requests/s, the largest pending and in-memory record
counts (during the load and after warm-up), the RSS at the end of the warm-up (``--warmup``,
default the first 20% of the run: the limit windows hold the last 60 s of requests, so the
first minute grows by design), at the end, its largest value after warm-up and its trend after
warm-up (least squares, MB/min), the drain time, and whether the spend report counts exactly the
requests sent. Checks: pending stays below ``--pending-bound``, no RSS sample after warm-up is
more than 10% above the first one, the report equals the requests sent. The exit status is 1
when a check fails. ``--samples PATH`` writes every sample to ``PATH-<store>.csv``.

    PYTHONPATH=src python bench/soak/run.py --duration 600                     # both stores
    PYTHONPATH=src python bench/soak/run.py --duration 60 --stores sqlite     # a short look
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import orjson
import yaml

from fleetgate.cli.processes import free_port, stop, wait_http
from fleetgate.providers.connections import ConnectionPool

MASTER = "sk-soak-master"
BODY = orjson.dumps(
    {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
)


# -- load: closed-loop client processes ---------------------------------------------------


def _client(url: str, key: str, concurrency: int, deadline: float, quota: int, out: Any) -> None:
    """One client process: ``concurrency`` loops until ``deadline`` or ``quota`` requests."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    asyncio.run(_client_main(url, key, concurrency, deadline, quota, out))


async def _client_main(
    url: str, key: str, concurrency: int, deadline: float, quota: int, out: Any
) -> None:
    pool = ConnectionPool(max_idle_per_host=concurrency * 2)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    statuses: Counter[int] = Counter()
    left = [quota]

    async def loop() -> None:
        while time.time() < deadline and left[0] > 0:
            left[0] -= 1
            try:
                resp = await pool.post(url, BODY, headers, connect_timeout=10)
                await resp.read()
                resp.release()
                statuses[resp.status] += 1
            except (TimeoutError, OSError) as exc:
                statuses[-1] += 1
                print(f"client error: {exc!r}", file=sys.stderr)

    await asyncio.gather(*(loop() for _ in range(concurrency)))
    await pool.aclose()
    out.put(dict(statuses))


# -- sampling -----------------------------------------------------------------------------


def _rss_mb(pid: int) -> float:
    """RSS of ``pid`` and its children (``--workers``), in MB."""
    pids = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                pids.append(int(entry.name))
    total_kb = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except OSError:
            continue
    return total_kb / 1024


def _metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


@dataclass
class Sample:
    at: float
    pending: float
    in_memory: float
    rss_mb: float


@dataclass
class Run:
    store: str
    samples: list[Sample] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    load_s: float = 0.0
    drain_s: float = 0.0
    reported: int = -1


async def _sample(session: aiohttp.ClientSession, url: str, pid: int, t0: float) -> Sample:
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    return Sample(
        at=time.monotonic() - t0,
        pending=_metric(text, "fleetgate_spend_pending_records") or 0.0,
        in_memory=_metric(text, "fleetgate_spend_memory_records") or 0.0,
        rss_mb=_rss_mb(pid),
    )


async def _sampler(
    session: aiohttp.ClientSession, url: str, pid: int, t0: float, every: float, run: Run
) -> None:
    while True:
        try:
            run.samples.append(await _sample(session, url, pid, t0))
        except (aiohttp.ClientError, OSError) as exc:
            print(f"sample failed: {exc!r}", file=sys.stderr)
        await asyncio.sleep(every)


# -- one store ----------------------------------------------------------------------------


async def _admin(
    session: aiohttp.ClientSession, url: str, method: str, path: str, **kw: Any
) -> Any:
    headers = {"Authorization": f"Bearer {MASTER}"}
    async with session.request(method, url + path, headers=headers, **kw) as resp:
        assert resp.status < 300, await resp.text()
        return await resp.json()


async def _key(session: aiohttp.ClientSession, url: str) -> str:
    team = await _admin(session, url, "POST", "/admin/teams", json={"name": "soak"})
    body = {"team": team["id"], "rpm": 10**9, "tpm": 2 * 10**9, "max_parallel": 100_000}
    key: str = (await _admin(session, url, "POST", "/admin/keys", json=body))["key"]
    return key


def _load(url: str, key: str, args: argparse.Namespace) -> tuple[dict[int, int], float]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    started = time.time()
    deadline = started + args.duration
    quota = max(1, args.max_requests // args.clients)
    procs = [
        ctx.Process(target=_client, args=(url, key, args.concurrency, deadline, quota, out))
        for _ in range(args.clients)
    ]
    for p in procs:
        p.start()
    statuses: Counter[int] = Counter()
    for _ in procs:
        statuses.update(out.get(timeout=args.duration + 120))
    for p in procs:
        p.join(30)
    return dict(statuses), time.time() - started


async def _soak(store: str, db_url: str | None, tmp: Path, args: argparse.Namespace) -> Run:
    run = Run(store)
    exe = [sys.executable, "-m", "fleetgate.cli.main"]
    env = {**os.environ, "FLEETGATE_MASTER_KEY": MASTER}
    env.pop("FLEETGATE_REDIS_URL", None)
    if db_url:
        env["FLEETGATE_DATABASE_URL"] = db_url
    procs: list[subprocess.Popen[bytes]] = []
    try:
        sim_port = free_port()
        procs.append(subprocess.Popen(
            [*exe, "sim", "--port", str(sim_port), "--output-len", "8"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))  # fmt: skip
        upstream = f"http://127.0.0.1:{sim_port}"
        await asyncio.to_thread(wait_http, upstream + "/health", procs[-1], 30.0)
        config = {"models": [{"alias": "tiny", "deployments": [{
            "provider": "openai", "model": "tiny", "api_base": f"{upstream}/v1",
            "price": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}}]}]}  # fmt: skip
        (tmp / "config.yaml").write_text(yaml.safe_dump(config))
        port = free_port()
        procs.append(subprocess.Popen(
            [*exe, "serve", "--config", str(tmp / "config.yaml"), "--port", str(port),
             "--no-watch", "--data-dir", str(tmp / "data"), "--workers", str(args.workers)],
            env=env, stdout=subprocess.DEVNULL, stderr=open(tmp / "gateway.log", "wb"),
        ))  # fmt: skip
        gateway = procs[-1]
        url = f"http://127.0.0.1:{port}"
        await asyncio.to_thread(wait_http, url + "/health/live", gateway, 60.0)
        async with aiohttp.ClientSession() as session:
            key = await _key(session, url)
            await asyncio.sleep(1.5)  # the new key reaches every worker's cache
            t0 = time.monotonic()
            sampler = asyncio.ensure_future(
                _sampler(session, url, gateway.pid, t0, args.sample_s, run)
            )
            chat = url + "/v1/chat/completions"
            run.statuses, run.load_s = await asyncio.to_thread(_load, chat, key, args)
            ended = time.monotonic()
            while time.monotonic() - ended < args.drain_timeout:
                if run.samples and run.samples[-1].at > ended - t0 and not run.samples[-1].pending:
                    break
                await asyncio.sleep(args.sample_s)
            run.drain_s = time.monotonic() - ended
            sampler.cancel()
            report = await _admin(session, url, "GET", "/admin/spend?group_by=team")
            run.reported = sum(r["requests"] for r in report["data"])
    finally:
        for proc in reversed(procs):
            stop(proc)
    return run


# -- report -------------------------------------------------------------------------------


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(x, y)`` points (0 for fewer than two)."""
    if len(points) < 2:
        return 0.0
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def _write_samples(run: Run, prefix: Path) -> None:
    lines = ["at_s,pending,in_memory,rss_mb"]
    lines += [f"{s.at:.1f},{s.pending:.0f},{s.in_memory:.0f},{s.rss_mb:.1f}" for s in run.samples]
    Path(f"{prefix}-{run.store}.csv").write_text("\n".join(lines) + "\n")


def _summary(run: Run, args: argparse.Namespace) -> bool:
    if args.samples:
        _write_samples(run, args.samples)
    sent = sum(run.statuses.values())
    ok = run.statuses.get(200, 0)
    during = [s for s in run.samples if s.at <= run.load_s]
    warm = [s for s in during if s.at >= args.warmup]
    if not warm:
        print(f"{run.store}: no samples after the warm-up ({args.warmup}s); run longer")
        return False
    rss_warm, rss_end = warm[0].rss_mb, warm[-1].rss_mb
    rss_peak = max(s.rss_mb for s in warm)
    growth = (rss_peak - rss_warm) / rss_warm * 100
    slope = _slope([(s.at, s.rss_mb) for s in warm]) * 60
    max_pending = max(s.pending for s in during)
    max_memory = max(s.in_memory for s in during)
    tail = [s.pending for s in warm if s.at >= run.load_s * 0.75] or [0.0]
    checks = {
        f"max pending < {args.pending_bound}": max_pending < args.pending_bound,
        "RSS after warm-up within +10% of its first sample": growth <= 10.0,
        "spend report == requests sent": run.reported == sent,
    }
    print(
        f"== {run.store}: {sent} requests in {run.load_s:.1f}s = {sent / run.load_s:.0f}/s "
        f"(200: {ok}, other: {dict((k, v) for k, v in run.statuses.items() if k != 200)})"
    )
    print(
        f"   pending records: max {max_pending:.0f} (last quarter max {max(tail):.0f}), "
        f"in memory max {max_memory:.0f}; drained {run.drain_s:.1f}s after the load"
    )
    print(
        f"   RSS: {rss_warm:.1f} MB at {warm[0].at:.0f}s (after warm-up), {rss_end:.1f} MB at "
        f"{warm[-1].at:.0f}s ({(rss_end - rss_warm) / rss_warm * 100:+.1f}%), max after "
        f"warm-up {rss_peak:.1f} MB ({growth:+.1f}%); trend after warm-up {slope:+.2f} MB/min"
    )
    print(f"   spend report: {run.reported} requests; sent {sent}")
    for name, passed in checks.items():
        print(f"   {'PASS' if passed else 'FAIL'}  {name}")
    return all(checks.values())  # fmt: skip


async def main(args: argparse.Namespace) -> int:
    ok = True
    for store in args.stores.split(","):
        tmp = Path(tempfile.mkdtemp(prefix=f"fg-soak-{store}-"))
        db_url = None
        if store == "postgres":
            name = f"fg_soak_{os.getpid()}_{os.urandom(3).hex()}"
            conn = await asyncpg.connect(args.postgres)
            await conn.execute(f'CREATE DATABASE "{name}"')
            await conn.close()
            db_url = args.postgres.rsplit("/", 1)[0] + "/" + name
        try:
            ok &= _summary(await _soak(store, db_url, tmp, args), args)
        finally:
            if db_url:
                conn = await asyncpg.connect(args.postgres)
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                await conn.close()
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=600, help="seconds of load (<= 3600)")
    parser.add_argument("--max-requests", type=int, default=20_000_000)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test",
                        help="a database to connect to for creating the soak's own")  # fmt: skip
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--concurrency", type=int, default=32, help="connections per client")
    parser.add_argument("--workers", type=int, default=1, help="gateway worker processes")
    parser.add_argument("--sample-s", type=float, default=1.0)
    parser.add_argument(
        "--warmup", type=float, default=None, help="seconds before the RSS baseline (20%% default)"
    )
    parser.add_argument("--drain-timeout", type=float, default=300)
    parser.add_argument("--pending-bound", type=int, default=20_000)
    parser.add_argument("--samples", type=Path, help="write every sample to PATH-<store>.csv")
    args = parser.parse_args()
    if not 0 < args.duration <= 3600:
        parser.error("--duration must be in (0, 3600]")
    if not set(args.stores.split(",")) <= {"sqlite", "postgres"}:
        parser.error("--stores: sqlite and/or postgres")
    for url in (args.postgres,):
        if "127.0.0.1" not in url and "localhost" not in url:
            parser.error("--postgres must be on 127.0.0.1")
    if args.warmup is None:
        args.warmup = args.duration * 0.2
    if args.warmup < 90:
        print(
            f"note: warm-up {args.warmup:.0f}s: the limit windows (60 s of requests) fill during "
            "the first minute, so RSS still grows then; use --duration >= 450 or --warmup >= 90",
            file=sys.stderr,
        )
    sys.exit(asyncio.run(main(args)))
