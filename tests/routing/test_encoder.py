"""Encoder pools: images are encoded on an encoder engine first, the language-model engine gets
the request with the encoder's ``ec_transfer_params``; affinity, the image budget and the
fallback to aggregated serving, end to end on the simulator."""

from __future__ import annotations

import base64
import contextlib
import io
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
from PIL import Image

from fleetgate.config.schema import DeploymentConfig, HealthConfig
from fleetgate.multimodal.image_dispatch import ImageDispatchHook
from fleetgate.multimodal.images.affinity import ImageAffinity
from fleetgate.multimodal.images.budget import ImageComputeBudget
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.encoder import EncoderStep
from fleetgate.routing.health import HealthTracker
from fleetgate.sim import SimConfig, running_sim
from fleetgate.telemetry.metrics import GatewayMetrics
from tests.conftest import AUTH, GatewayFactory
from tests.procs import metric_value
from tests.routing.support import route_ctx

SIM: dict[str, Any] = dict(
    model="m", prefill_ms_per_token=0.001, decode_ms_per_step=0.1, output_len=2,
    image_tokens=64, encode_ms_per_image_token=0.01,
)  # fmt: skip
PRODUCER = SimConfig(**SIM, ec_role="ec_producer")
CONSUMER = SimConfig(**SIM, ec_role="ec_consumer")


def _png(color: tuple[int, int, int]) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _chat(*images: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}} for u in images]
    parts.append({"type": "text", "text": "what is this?"})
    return {"model": "vl", "max_tokens": 2, "messages": [{"role": "user", "content": parts}]}


async def _stats(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/sim/stats") as resp:
        return dict(await resp.json())


def _config(encoders: list[str], models: list[str], **extra: Any) -> dict[str, Any]:
    deps = [
        {"model": "m", "api_base": f"{u}/v1", "name": f"enc{i}", "tags": ["encoder"]}
        for i, u in enumerate(encoders)
    ]
    deps += [{"model": "m", "api_base": f"{u}/v1", "name": f"lm{i}"} for i, u in enumerate(models)]
    return {"models": [{"alias": "vl", "strategy": "least-load", "deployments": deps}],
            "tenancy": {"enabled": False}, **extra}  # fmt: skip


async def test_images_are_encoded_on_the_encoder_pool_and_the_model_pulls_them(
    gateway: GatewayFactory,
) -> None:
    async with AsyncExitStack() as stack:
        enc = await stack.enter_async_context(running_sim(PRODUCER))
        lm = await stack.enter_async_context(running_sim(CONSUMER))
        client = await gateway(_config([enc], [lm]))
        red, blue = _png((255, 0, 0)), _png((0, 0, 255))
        resp = await client.post("/v1/chat/completions", json=_chat(red, blue), headers=AUTH)
        assert resp.status == 200, await resp.text()
        assert resp.headers["x-fleetgate-deployment"] == "lm0"  # never the encoder itself
        e_stats, lm_stats = await _stats(enc), await _stats(lm)
        assert e_stats["requests_received"] == 2  # one request per image
        assert e_stats["images_encoded"] == 2 and e_stats["steps"] == 0
        assert (lm_stats["images_received"], lm_stats["images_encoded"]) == (2, 0)

        text = {"model": "vl", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
        resp = await client.post("/v1/chat/completions", json=text, headers=AUTH)
        assert resp.status == 200 and resp.headers["x-fleetgate-deployment"] == "lm0"
        assert (await _stats(enc))["requests_received"] == 2  # text skips the encoder

        metrics = await (await client.get("/metrics")).text()
        name = "fleetgate_encoder_requests_total"
        assert metric_value(metrics, name, alias="vl", mode="disaggregated") == 1


async def test_image_affinity_keeps_an_image_on_the_encoder_that_has_it(
    gateway: GatewayFactory,
) -> None:
    async with AsyncExitStack() as stack:
        encs = [await stack.enter_async_context(running_sim(PRODUCER))
                for _ in range(2)]  # fmt: skip
        lm = await stack.enter_async_context(running_sim(CONSUMER))
        client = await gateway(_config(encs, [lm]))
        image = _png((0, 255, 0))
        for _ in range(8):
            resp = await client.post("/v1/chat/completions", json=_chat(image), headers=AUTH)
            assert resp.status == 200, await resp.text()
        stats = [await _stats(u) for u in encs]
        # encoded once, then always the warm encoder (a random choice between two idle
        # encoders would have split the eight requests)
        assert sorted(s["images_encoded"] for s in stats) == [0, 1]
        assert sorted(s["encoder_cache_hits"] for s in stats) == [0, 7]


async def test_an_unhealthy_encoder_pool_falls_back_to_aggregated_serving(
    gateway: GatewayFactory,
) -> None:
    async with AsyncExitStack() as stack:
        lm = await stack.enter_async_context(running_sim(CONSUMER))
        async with running_sim(PRODUCER) as gone:
            pass  # its port is closed now
        cfg = _config([gone], [lm], health={"cooldown_s": 60, "probe_interval_s": 60})
        client = await gateway(cfg)
        for color in ((1, 2, 3), (4, 5, 6)):
            resp = await client.post("/v1/chat/completions", json=_chat(_png(color)), headers=AUTH)
            assert resp.status == 200, await resp.text()
            assert resp.headers["x-fleetgate-deployment"] == "lm0"
        assert (await _stats(lm))["images_encoded"] == 2  # the model encoded them itself
        metrics = await (await client.get("/metrics")).text()
        name = "fleetgate_encoder_requests_total"
        assert metric_value(metrics, name, alias="vl", mode="aggregated-encoder-failed") == 1
        assert metric_value(metrics, name, alias="vl", mode="aggregated-encoder-down") == 1


async def test_the_image_budget_and_affinity_are_held_on_the_encoder_not_the_model() -> None:
    async with running_sim(PRODUCER) as url:
        provider: Any = None
        enc0, enc1 = (
            Deployment(name, "vl", DeploymentConfig(model="m", api_base=f"{url}/v1",
                                                    tags=("encoder",)), provider)
            for name in ("enc0", "enc1")
        )  # fmt: skip
        budget = ImageComputeBudget(default_tokens_in_flight=1000)
        affinity = ImageAffinity(ttl_s=60)
        affinity.record(["img-key"], "enc1")  # enc1 encoded this image before
        held: list[int] = []

        class ModelHook:  # a hook of the language-model call (vLLM's priority, say)
            def prefer(self, candidates: Any) -> Any:
                return ()

            def extra_body(self, dep: Any) -> None:
                return None

            def admit(self, dep: Any) -> Any:
                held.append(1)
                return contextlib.nullcontext()

        hook = ImageDispatchHook(["img-key"], 300, affinity=affinity, budget=budget)
        model_hook = ModelHook()
        ctx = route_ctx("vl", body=_chat(_png((9, 9, 9))))
        health = HealthTracker(HealthConfig(), GatewayMetrics(), lambda: [enc0, enc1])
        http = OutboundHttp()
        try:
            left = await EncoderStep(http).run("vl", [enc0, enc1], ctx, [hook, model_hook], health)
        finally:
            await http.aclose()
        assert hook.admitted_to == "enc1"  # affinity chose it, and the budget was taken there
        assert held == [] and list(left) == [model_hook]  # the image hook's work is done
        assert ctx.ec_transfer and all(v["do_remote_encode"] for v in ctx.ec_transfer.values())
        assert budget.in_flight("enc1") == 0  # released once the encoder answered


async def test_encoder_then_prefill_then_decode(gateway: GatewayFactory) -> None:
    async with AsyncExitStack() as stack:
        enc, pre, dec = [await stack.enter_async_context(running_sim(cfg))
                         for cfg in (PRODUCER, CONSUMER, CONSUMER)]  # fmt: skip
        client = await gateway({
            "models": [{"alias": "vl", "strategy": "pd-disagg", "deployments": [
                {"model": "m", "api_base": f"{enc}/v1", "name": "enc0", "tags": ["encoder"]},
                {"model": "m", "api_base": f"{pre}/v1", "name": "p0", "tags": ["prefill"]},
                {"model": "m", "api_base": f"{dec}/v1", "name": "d0", "tags": ["decode"]}]}],
            "routing": {"scrape_interval_s": 0.05, "kv_aware": {"pd_min_prompt_tokens": 1}},
            "tenancy": {"enabled": False},
        })  # fmt: skip
        body = _chat(_png((7, 7, 7)))
        resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
        assert resp.status == 200, await resp.text()
        assert resp.headers["x-fleetgate-deployment"] == "d0"
        metrics = await (await client.get("/metrics")).text()
        assert metric_value(metrics, "fleetgate_pd_requests_total", mode="disaggregated") == 1, [
            line for line in metrics.splitlines() if "pd_requests" in line
        ]
        assert (await _stats(enc))["images_encoded"] == 1
        prefill = await _stats(pre)  # it pulled the encoder's output and encoded nothing
        assert (prefill["images_received"], prefill["images_encoded"]) == (1, 0)
        decode = await _stats(dec)  # it got the image's KV with the prompt's
        assert (decode["images_received"], decode["images_encoded"]) == (0, 0)
        assert decode["kv_pulled_tokens"] > 64
