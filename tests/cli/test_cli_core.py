"""The command line: config check, serve with workers, up, SIGHUP reload."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from tests.procs import free_port, metric_value, serve_process, sim_process

from fleetgate.cli.main import main
from fleetgate.cli.serve import serve_forever
from fleetgate.config.settings import Settings
from fleetgate.errors import ConfigError

GOOD = {"models": [{"alias": "a", "deployments": [{"model": "m", "api_base": "http://x/v1"}]}]}


def test_config_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    assert main(["config", "check", str(path)]) == 0
    assert "OK (1 aliases, 1 deployments)" in capsys.readouterr().out
    path.write_text("models: [{alias: a, strategy: nope, deployments: [{model: m, api_base: x}]}]")
    assert main(["config", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "deployments[0].api_base" in err


def _chat(url: str, key: str, model: str) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
def test_serve_with_two_workers_and_sighup_reload(tmp_path: Path) -> None:
    with sim_process("--mode", "echo") as sim:
        cfg = {"models": [{"alias": "a", "deployments": [{"model": "tiny", "api_base": sim}]}]}
        with serve_process(
            cfg, tmp_path, master_key="k", extra_args=["--workers", "2", "--no-watch"]
        ) as (url, proc):
            for _ in range(10):
                assert _chat(url, "k", "a")[0] == 200
            time.sleep(2.5)  # each worker publishes its metrics every second
            for _ in range(4):  # whichever worker answers the scrape counts all of them
                with urllib.request.urlopen(url + "/metrics") as resp:
                    text = resp.read().decode()
                assert metric_value(text, "fleetgate_requests_total", alias="a") == 10
            cfg_path = next(tmp_path.glob("gateway-*.yaml"))
            cfg["models"][0]["alias"] = "b"
            cfg_path.write_text(yaml.safe_dump(cfg))
            os.kill(proc.pid, signal.SIGHUP)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                # every worker must have reloaded: ask several times
                if all(_chat(url, "k", "b")[0] == 200 for _ in range(8)):
                    break
                time.sleep(0.1)
            assert all(_chat(url, "k", "b")[0] == 200 for _ in range(8))
            assert _chat(url, "k", "a")[0] == 404


@pytest.mark.slow
def test_up_serves_both_aliases(tmp_path: Path) -> None:
    port, engine_port = free_port(), free_port()
    env = {**os.environ, "FLEETGATE_MASTER_KEY": ""}
    env.pop("FLEETGATE_LIBRARY_LOG_LEVEL", None)
    stderr = (tmp_path / "stderr.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetgate.cli.main", "up", "--port", str(port),
         "--engine-port", str(engine_port), "--data-dir", str(tmp_path / "fg")],
        stdout=subprocess.PIPE, stderr=stderr, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().decode() for _ in range(5)]
        assert lines[0].startswith(f"fleetgate is up at http://127.0.0.1:{port}/v1")
        # the banner comes once the port accepts connections: one try, no waiting
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        key = lines[1].split(":", 1)[1].strip()
        assert key == (tmp_path / "fg" / "master_key").read_text().strip()
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(url + "/health/ready", timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        for alias in ("fast-small", "smart"):
            status, body = _chat(url, key, alias)
            assert status == 200, body
        assert (tmp_path / "fg" / "config.yaml").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
        if proc.stdout is not None:
            proc.stdout.close()
        stderr.close()
    logs = (tmp_path / "stderr.log").read_text()
    assert "fleetgate listening on" in logs  # fleetgate's own INFO lines stay
    assert "alembic" not in logs  # library INFO lines are off unless asked for


def test_up_on_a_busy_port_says_so_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["up", "--port", str(port), "--data-dir", str(tmp_path / "fg")]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in err
    assert "--port" in err
    assert not (tmp_path / "fg").exists()  # no engine started, nothing written


async def test_serve_on_a_busy_port_is_one_clear_error(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(GOOD))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        settings = Settings(
            master_key="k", config_path=cfg, port=port, data_dir=tmp_path, watch_config=False
        )
        banner: list[str] = []
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}: Address"):
            await serve_forever(settings, on_listening=lambda: banner.append("up"))
    assert banner == []
