"""The Kubernetes launcher across a gateway crash, against a real HTTP server that speaks the
Kubernetes API the launcher uses (`tests.releases.kube_api`; no cluster here): a gateway process
running a version's pipeline is SIGKILLed after its temporary instance's Deployment was applied
and before it became ready; the restarted gateway takes the run over, applies the same objects
again (409 on create, then a replace: still one Deployment, same uid) instead of a second
instance, waits for it to be ready, and the run ends ``passed`` with the objects deleted."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.releases.kube_api import FakeKubeApi, fake_kube_api
from tests.releases.pipeline_support import GatewayProcess, free_port, sim_version

pytest.importorskip("kubernetes", reason="pip install 'fleetgate[kube]'")

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENTS = "/apis/apps/v1/namespaces/engines/deployments"
NAME = "engine-chat-v1-eval"


def calls(api: FakeKubeApi, method: str, path: str) -> int:
    return sum(1 for c in api.calls if c == (method, path))


async def until(check: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_gateway_killed_between_apply_and_ready_resumes_the_same_objects(
    tmp_path: Path,
) -> None:
    async with fake_kube_api() as api:
        config = {
            "models": [{"alias": "chat", "registry": {"model": "chat", "stage": "production"}}],
            "health": {"probe_interval_s": 30},
            "releases": {"poll_interval_s": 0.2},
            "pipelines": {
                "launcher": "kubernetes", "kube_namespace": "engines",
                "kube_base_dir": str(ROOT / "deploy" / "kubernetes" / "engines" / "base"),
                "tick_s": 0.2, "lease_s": 2.0, "start_timeout_s": 60,
                "models": {"chat": {"alias": "chat", "release": "gate"}},
            },
        }  # fmt: skip
        env = {"KUBECONFIG": str(api.kubeconfig(tmp_path / "kubeconfig"))}
        gw = GatewayProcess(tmp_path, config, env)
        await gw.start()
        try:
            assert (await gw.admin("POST", "/admin/registry/models", {"name": "chat"}))[0] == 201
            version = sim_version(1, free_port())
            assert (await gw.admin("POST", "/admin/registry/models/chat/versions", version))[
                0
            ] == 201
            # applied, and the launcher is waiting for it to be ready: kill the gateway there
            await until(lambda: calls(api, "GET", f"{DEPLOYMENTS}/{NAME}/status") >= 1, 60,
                        "the launcher to wait for readiness")  # fmt: skip
            status, run = await gw.admin("GET", "/admin/pipelines/chat/v1")
            assert [s["name"] for s in run["steps"]] == ["instance_up"], run["steps"]
            assert run["steps"][0]["status"] == "running"
            first_owner = run["steps"][0]["by"]
            await gw.kill()
            assert list(api.deployments) == [("engines", NAME)]
            assert list(api.services) == [("engines", NAME)]
            pod = api.deployments[("engines", NAME)]["spec"]["template"]["spec"]
            assert pod["containers"][0]["command"][:3] == ["fleetgate", "sim", "--mode"]

            api.ready = True  # the pod came up while no gateway was watching
            await gw.start()
            run = await gw.wait_run("v1", ("passed", "failed", "stopped"), timeout_s=90)
            assert run["status"] == "passed", (run["reason"], run["steps"])
            up = run["steps"][0]
            assert up["name"] == "instance_up" and up["by"] == first_owner
            assert len(up["resumed"]) == 1 and up["resumed"] != [first_owner]
            assert up["detail"]["urls"] == [
                f"http://{NAME}.engines.svc.cluster.local:8000/v1"
            ]  # fmt: skip
            # one Deployment and one Service all along: the restarted gateway's apply was
            # answered 409 and replaced the Deployment over itself
            assert [c[:3] for c in api.created] == [
                ("Deployment", "engines", NAME), ("Service", "engines", NAME),
            ]  # fmt: skip
            assert calls(api, "POST", DEPLOYMENTS) == 2  # the second answered 409
            assert calls(api, "PUT", f"{DEPLOYMENTS}/{NAME}") == 1
            # instance_down deleted both objects; nothing is left running
            assert calls(api, "DELETE", f"{DEPLOYMENTS}/{NAME}") == 1
            assert api.deployments == {} and api.services == {}
            assert [s["name"] for s in run["steps"]] == [
                "instance_up", "suites", "gate", "instance_down",
            ]  # fmt: skip
        finally:
            await gw.stop()
