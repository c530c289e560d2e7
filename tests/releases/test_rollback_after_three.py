"""After three versions released through the pipeline (v1 promoted, v2 and v3 rolled out
progressively on live traffic), one rollback call moves all of the alias's traffic, on both
gateway replicas, back to v2 within 2 s, and no engine is started on the way: v2's engines
were kept by the pipeline's ``keep`` step. Two gateway processes share PostgreSQL; a client
sends to each throughout and every answer names the deployment (version) that served it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from tests.releases.pipeline_support import (
    GatewayProcess,
    Traffic,
    free_port,
    gateway_config,
    sim_version,
    step_seconds,
    write_suites,
)
from tests.releases.test_pipeline import _stop_all

DONE = ("released", "failed", "stopped", "rolled_back")


def children(parents: set[int]) -> set[int]:
    """The processes whose parent is one of ``parents`` (the engines a gateway launched: they
    run in their own session but stay its children)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) in parents:
            found.add(int(stat.parent.name))
    return found


def all_on(seen: list[tuple[float, int, str]], since: float, deployment: str) -> float | None:
    """Seconds from ``since`` to the last answer not from ``deployment`` (0 when every answer
    after ``since`` came from it); None while fewer than 1.5 s of answers from it follow."""
    after = [s for s in seen if s[0] > since]
    other = [t for t, code, d in after if d != deployment or code != 200]
    last = max(other, default=since)
    if not after or after[-1][0] - last < 1.5:
        return None
    return last - since


async def test_rollback_after_three_releases_is_a_traffic_shift(
    tmp_path: Path, shared_pg_url: str
) -> None:
    golden, _ = write_suites(tmp_path, golden_items=24, max_tokens=32)
    config = gateway_config(golden, None)
    config["pipelines"]["log_dir"] = str(tmp_path / "engines")  # both replicas' launches
    env = {"FLEETGATE_DATABASE_URL": shared_pg_url}
    roots = [tmp_path / "a", tmp_path / "b"]
    for root in roots:
        root.mkdir()
    gateways = [GatewayProcess(root, config, env) for root in roots]
    ports = {n: free_port() for n in (1, 2, 3)}
    await asyncio.gather(*(gw.start() for gw in gateways))
    a, b = gateways
    timings: dict[str, dict[str, float]] = {}
    try:
        assert (await a.admin("POST", "/admin/registry/models", {"name": "chat"}))[0] == 201

        marks: dict[str, float] = {}

        async def release(n: int) -> None:
            marks[f"v{n}"] = time.monotonic()
            status, body = await (a, b)[n % 2].admin(
                "POST", "/admin/registry/models/chat/versions", sim_version(n, ports[n])
            )
            assert status == 201, body
            run = await a.wait_run(f"v{n}", DONE, timeout_s=240)
            assert run["status"] == "released", (run["reason"], run["steps"][-2:])
            timings[f"v{n}"] = step_seconds(run)
            marks[f"v{n} released"] = time.monotonic()
            rollout = run["steps"][5]["detail"]
            assert rollout["baseline"] == (f"v{n - 1}" if n > 1 else None), rollout

        await release(1)  # promoted: production was empty
        await asyncio.sleep(1.0)  # both replicas follow it
        async with Traffic(a.url) as on_a, Traffic(b.url) as on_b:
            await release(2)  # rolled out on the traffic: 50% -> 100%, then promoted
            await release(3)
            _, run = await a.admin("GET", "/admin/pipelines/chat/v3")
            _, model = await a.admin("GET", "/admin/registry/models/chat")
            assert (model["stages"]["production"], model["stages"]["previous"]) == ("v3", "v2")
            assert run["steps"][6]["detail"]["kept"] == ["v3", "v2", "v1"]
            await asyncio.sleep(1.5)
            for traffic in (on_a, on_b):  # both replicas serve v3 alone before the rollback
                assert all_on(traffic.seen, time.monotonic() - 1.6, "chat-v3") == 0.0

            gateway_pids = {gw.proc.pid for gw in gateways if gw.proc is not None}
            engines_before = children(gateway_pids)
            logs_before = {p.name: p.stat().st_ino for p in (tmp_path / "engines").iterdir()}
            assert len(engines_before) == 3  # one production engine per released version

            began = time.monotonic()
            status, body = await b.admin("POST", "/admin/registry/models/chat/rollback", {})
            assert status == 200, body
            shifts: list[float | None] = [None, None]
            while None in shifts and time.monotonic() - began < 15:
                await asyncio.sleep(0.1)
                shifts = [all_on(t.seen, began, "chat-v2") for t in (on_a, on_b)]
            assert None not in shifts, (on_a.seen[-5:], on_b.seen[-5:])
            shift_s = max(s for s in shifts if s is not None)
            assert shift_s <= 2.0, shifts
            assert children(gateway_pids) == engines_before  # no engine started or stopped
            logs_after = {p.name: p.stat().st_ino for p in (tmp_path / "engines").iterdir()}
            assert logs_after == logs_before
            everything = on_a.seen + on_b.seen
            failed = [s for s in everything if s[1] != 200]
            if failed:  # which replica drove which step (and took which over) says why
                for n in (1, 2, 3):
                    _, r = await a.admin("GET", f"/admin/pipelines/chat/v{n}")
                    print([(st["name"], st["by"], st.get("resumed")) for st in r["steps"]])
            assert not failed, (len(failed), failed[0], failed[-1], marks)
        _, model = await a.admin("GET", "/admin/registry/models/chat")
        assert (model["stages"]["production"], model["stages"]["previous"]) == ("v2", "v3")
        print(f"\nstep seconds: {timings}\nrollback to v2 after three releases: all traffic "
              f"on v2 after {shifts[0]:.3f} s (replica a), {shifts[1]:.3f} s (replica b); "
              f"{len(everything)} answers, none failed")  # fmt: skip
    finally:
        for gw in (b, a):
            await _stop_all_quiet(gw)


async def _stop_all_quiet(gw: GatewayProcess) -> Any:
    try:
        await _stop_all(gw)
    except (OSError, AssertionError):  # the other replica already stopped the engines
        await gw.stop()
