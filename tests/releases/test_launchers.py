"""Engine launchers: the serve command from a registry entry; the local launcher starts,
checks, scales and stops simulator processes on 127.0.0.1; the Kubernetes launcher's objects
are schema-valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fleetgate.errors import UpstreamConnectError
from fleetgate.releases.launchers import Engines, LocalLauncher, render_objects, serve_spec
from tests.procs import free_port

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "kubernetes" / "engines" / "base"


def version(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": "chat", "version": f"v{n}", "artifact_uri": f"s3://models/chat/{n}",
        "tokenizer": "meta-llama/Llama-3.1-8B", "tensor_parallel": 2, "max_model_len": 8192,
        "quantization": None, "parent_version": None, "card": None,
        "deployments": [{"model": "llama-8b", "api_base": "http://10.0.0.7:8000/v1"}], **extra,
    }  # fmt: skip


def test_the_serve_command_comes_from_the_registry_entry() -> None:
    spec = serve_spec(version(7, quantization="awq"))
    assert spec.kind == "vllm" and spec.served_model == "llama-8b"
    assert spec.with_address("127.0.0.1", 9001) == [
        "vllm", "serve", "s3://models/chat/7", "--tokenizer", "meta-llama/Llama-3.1-8B",
        "--tensor-parallel-size", "2", "--max-model-len", "8192", "--quantization", "awq",
        "--served-model-name", "llama-8b", "--host", "127.0.0.1", "--port", "9001",
    ]  # fmt: skip
    sim = serve_spec(
        version(8, card={"serve": "fleetgate sim --mode echo --corrupt-fraction 0.08"})
    )
    assert sim.kind == "sim"
    assert sim.with_address("127.0.0.1", 1)[:6] == [
        "fleetgate", "sim", "--mode", "echo", "--corrupt-fraction", "0.08",
    ]  # fmt: skip
    assert "--model" in sim.with_address("127.0.0.1", 1)
    assert serve_spec(version(9, artifact_uri="sim://tiny")).argv[:2] == ["fleetgate", "sim"]


def sim_version(n: int, port: int | None = None, *extra: str) -> dict[str, Any]:
    api_base = f"http://127.0.0.1:{port}/v1" if port else "http://10.0.0.9:8000/v1"
    return version(n, card={"serve": ["fleetgate", "sim", "--mode", "echo", *extra]},
                   deployments=[{"model": "tiny", "api_base": api_base}])  # fmt: skip


async def answers(url: str) -> bool:
    try:
        async with aiohttp.ClientSession() as session:
            body = {"model": "tiny", "messages": [{"role": "user", "content": "hi there"}]}
            async with session.post(url + "/chat/completions", json=body) as resp:
                return resp.status == 200 and "hi there" in await resp.text()
    except aiohttp.ClientError:
        return False


async def test_local_launcher_starts_scales_and_stops(tmp_path: Path) -> None:
    port = free_port()
    launcher = LocalLauncher(tmp_path / "logs", start_timeout_s=60)
    engines = await launcher.start(sim_version(2, port), role="eval", replicas=2)
    try:
        # the first engine on the port the registry entry names, the second on a free one
        assert engines.urls[0] == f"http://127.0.0.1:{port}/v1" and engines.replicas == 2
        assert await launcher.healthy(engines)
        assert all([await answers(u) for u in engines.urls])
        assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [
            "chat-v2-eval-0.log", "chat-v2-eval-1.log"]  # fmt: skip
        one = await launcher.scale(engines, 1)
        assert one.urls == engines.urls[:1] and await launcher.healthy(one)
        assert not await answers(engines.urls[1])
        # found again from what a pipeline row stores (another process's launcher)
        again = Engines.from_dict(one.to_dict())
        await LocalLauncher(tmp_path / "logs", stop_timeout_s=5).stop(again)
        assert not await launcher.healthy(one) and not await answers(engines.urls[0])
    finally:
        await launcher.stop(engines)


async def test_an_engine_that_exits_fails_the_start_and_leaves_nothing(tmp_path: Path) -> None:
    launcher = LocalLauncher(tmp_path, start_timeout_s=60)
    bad = sim_version(3, None, "--corrupt-fraction", "7")  # refused by the simulator
    with pytest.raises(UpstreamConnectError, match="exited with status 2"):
        await launcher.start(bad, role="eval")
    assert "corrupt_fraction must be within 0..1" in (tmp_path / "chat-v3-eval-0.log").read_text()


async def test_an_engine_that_never_answers_is_killed(tmp_path: Path) -> None:
    launcher = LocalLauncher(tmp_path, start_timeout_s=1.0, stop_timeout_s=2.0)
    silent = version(4, card={"serve": ["python3", "-c", "import time; time.sleep(30)"]})
    with pytest.raises(UpstreamConnectError, match="not healthy within 1 s"):
        await launcher.start(silent, role="eval")
    assert not launcher._procs  # killed and reaped


kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")


@pytest.mark.parametrize("entry", [version(7), sim_version(8)], ids=["vllm", "sim"])
def test_kubernetes_objects_are_schema_valid(entry: dict[str, Any]) -> None:
    objects = render_objects(entry, BASE, role="production", replicas=3, namespace="engines")
    for obj in objects:
        kv.validate(obj, "1.29.0", strict=True)
    deployment, service = objects
    name = f"engine-chat-{entry['version']}"
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == name
    assert deployment["spec"]["replicas"] == 3
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["fleetgate.io/version"] == entry["version"]
    assert labels["kueue.x-k8s.io/priority-class"] == "production-inference"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    if entry["version"] == "v7":
        assert container["args"][:2] == ["--model", "s3://models/chat/7"]
        assert "--served-model-name" in container["args"] and "8000" in container["args"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    else:
        assert container["command"][:2] == ["fleetgate", "sim"] and "resources" not in container
    evaluation = render_objects(entry, BASE, role="eval", replicas=1)[0]
    assert evaluation["metadata"]["name"] == f"{name}-eval"
    assert evaluation["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "evaluation"
