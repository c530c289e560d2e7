import argparse
import asyncio
import os
import signal
import sys

import aiohttp

from fleetgate.cli import sim

LAUNCH = (
    "import argparse, sys\n"
    "from fleetgate.cli import sim\n"
    "p = argparse.ArgumentParser(prog='fleetgate')\n"
    "sim.register(p.add_subparsers())\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "sys.exit(a.func(a))\n"
)


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fleetgate")
    sim.register(parser.add_subparsers())
    return parser.parse_args(["sim", *argv])


def test_flags_build_the_config() -> None:
    args = _parse("--mode", "echo", "--kv-blocks", "64", "--error-rate", "0.5", "--spike-ms", "9")
    config = sim.config_from_args(args)
    assert args.func is sim.run and args.host == "127.0.0.1" and args.model == "tiny"
    assert config.mode == "echo" and config.kv_blocks == 64 and config.block_size == 16
    assert config.faults.error_rate == 0.5 and config.faults.spike_ms == 9


def test_bad_flag_values_exit_2() -> None:
    assert sim.run(_parse("--error-rate", "3")) == 2


async def test_serves_until_sigterm() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LAUNCH, "sim", "--port", "0", "--mode", "echo",
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        url = line.rsplit(" ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as s, s.get(f"{url}/health") as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_corrupt_fraction_flag() -> None:
    config = sim.config_from_args(_parse("--mode", "echo", "--corrupt-fraction", "0.03"))
    assert config.corrupt_fraction == 0.03
    assert sim.run(_parse("--corrupt-fraction", "1.5")) == 2


def test_kv_events_config_takes_vllms_json() -> None:
    cfg = (
        '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",'
        ' "replay_endpoint": "tcp://*:5558", "topic": "kv"}'
    )
    config = sim.config_from_args(_parse("--kv-events-config", cfg))
    assert config.kv_events_endpoint == "tcp://*:5557"
    assert config.kv_events_replay_endpoint == "tcp://*:5558"
    assert config.kv_events_topic == "kv"
    off = sim.config_from_args(_parse("--kv-events-config", '{"enable_kv_cache_events": false}'))
    assert off.kv_events_endpoint is None
    for bad in ("{not json", '{"enable_kv_cache_events": true, "publisher": "null"}'):
        try:
            sim.config_from_args(_parse("--kv-events-config", bad))
        except SystemExit as exc:
            assert "--kv-events-config" in str(exc)
        else:
            raise AssertionError(f"accepted {bad}")
