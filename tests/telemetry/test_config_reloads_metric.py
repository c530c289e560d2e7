"""``fleetgate_config_reloads_total`` counts every reload of the config file by its source:
the admin endpoint, an edit the watcher saw, SIGHUP; refused ones too."""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.procs import metric_value, serve_process

MASTER = "sk-reload-master"
NAME = "fleetgate_config_reloads_total"


def _config(description: str) -> dict[str, Any]:
    dep = {"provider": "openai", "model": "m", "api_base": "http://127.0.0.1:9/v1"}
    return {"models": [{"alias": "tiny", "description": description, "deployments": [dep]}]}


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def _wait_for(url: str, want: float, **labels: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if metric_value(_metrics(url), NAME, **labels) >= want:
            return
        time.sleep(0.2)
    raise AssertionError(f"{NAME}{labels} never reached {want}:\n{_metrics(url)}")


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    later = time.time() + 1  # a new mtime even on a coarse clock
    os.utime(path, (later, later))


def test_reloads_are_counted_by_source_and_result(tmp_path: Path) -> None:
    with serve_process(_config("one"), tmp_path, master_key=MASTER) as (url, proc):
        (cfg,) = tmp_path.glob("gateway-*.yaml")
        req = urllib.request.Request(
            url + "/admin/config/reload", method="POST",
            headers={"Authorization": f"Bearer {MASTER}"},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        _wait_for(url, 1, source="admin", result="applied")
        _write(cfg, yaml.safe_dump(_config("two")))  # an edit: the watcher reloads it
        _wait_for(url, 1, source="file", result="applied")
        _write(cfg, "models: [")  # a broken edit: refused, the old config kept
        _wait_for(url, 1, source="file", result="refused")
        _write(cfg, yaml.safe_dump(_config("three")))
        _wait_for(url, 2, source="file", result="applied")
        proc.send_signal(signal.SIGHUP)
        _wait_for(url, 1, source="sighup", result="applied")
        text = _metrics(url)
        assert metric_value(text, NAME, source="admin") == 1  # nothing counted twice
        assert metric_value(text, NAME) == 5
