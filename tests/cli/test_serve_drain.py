"""SIGTERM drains: a stream in flight finishes within ``server.shutdown_grace_s``, and one that
outlasts the grace period is cut off; new connections are refused at once."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
from tests.procs import serve_process, sim_process

MASTER = "sk-drain"


def _stream(base: str, max_tokens: int, lines: list[str], first: threading.Event) -> None:
    url = urlparse(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    body = {"model": "slow", "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "count"}]}  # fmt: skip
    headers = {"Authorization": f"Bearer {MASTER}", "Content-Type": "application/json"}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
    resp = conn.getresponse()
    try:
        for raw in resp:
            line = raw.decode().strip()
            if line:
                lines.append(line)
                first.set()
    except (http.client.HTTPException, OSError):
        lines.append("<cut>")
    finally:
        first.set()
        conn.close()


def _run(tmp_path: Path, grace_s: float, max_tokens: int) -> tuple[list[str], int, float]:
    with sim_process("--model", "tiny", "--decode-ms-per-step", "50", "--mode", "random") as sim:
        config = {
            "models": [{"alias": "slow", "deployments": [{"model": "tiny", "api_base": sim}]}],
            "server": {"shutdown_grace_s": grace_s},
            "tenancy": {"enabled": False},
        }
        with serve_process(config, tmp_path, master_key=MASTER) as (base, proc):
            lines: list[str] = []
            first = threading.Event()
            reader = threading.Thread(target=_stream, args=(base, max_tokens, lines, first))
            reader.start()
            assert first.wait(20)
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            url = urlparse(base)
            with pytest.raises(OSError):  # the listener is closed while the stream drains
                conn = http.client.HTTPConnection(url.hostname, url.port, timeout=2)
                conn.request("GET", "/health/live")
                conn.getresponse()
            reader.join(30)
            code = proc.wait(30)
            return lines, code, time.monotonic() - sent


@pytest.mark.slow
def test_stream_in_flight_finishes_after_sigterm(tmp_path: Path) -> None:
    lines, code, _ = _run(tmp_path, grace_s=30, max_tokens=40)  # about 2 s of decoding
    assert lines[-1] == "data: [DONE]", lines[-3:]
    assert sum(1 for line in lines if line.startswith("data: {")) >= 40
    assert code == 0


@pytest.mark.slow
def test_stream_longer_than_the_grace_period_is_cut(tmp_path: Path) -> None:
    lines, code, took = _run(tmp_path, grace_s=0.5, max_tokens=400)  # about 20 s of decoding
    assert "data: [DONE]" not in lines
    assert took < 10
    assert code == 0
