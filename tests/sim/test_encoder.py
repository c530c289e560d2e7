"""The simulator's vision encoder: encode time in the step, the encoder cache, and the producer
and consumer roles of vLLM's encoder disaggregation."""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from fleetgate.sim import SimConfig, running_sim
from fleetgate.sim.encoder import mm_hash

CFG: dict[str, Any] = dict(
    model="m", prefill_ms_per_token=0.001, decode_ms_per_step=0.1, output_len=2,
    image_tokens=100, encode_ms_per_image_token=2.0,
)  # fmt: skip
IMG = "data:image/png;base64,AAAA"


def _body(*urls: str, **extra: Any) -> dict[str, Any]:
    parts = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    content = [*parts, {"type": "text", "text": "what is this?"}]
    return {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": content}],
            **extra}  # fmt: skip


async def _chat(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with http.post(f"{url}/v1/chat/completions", json=body) as resp:
        return resp.status, await resp.json()


async def _stats(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(f"{url}/sim/stats") as resp:
        return dict(await resp.json())


async def test_an_aggregated_engine_encodes_new_images_in_its_step_and_caches_them() -> None:
    async with running_sim(SimConfig(**CFG)) as url, aiohttp.ClientSession() as http:
        started = time.perf_counter()
        status, _ = await _chat(http, url, _body(IMG))
        assert status == 200
        assert time.perf_counter() - started >= 0.2  # 100 image tokens x 2 ms, a lower bound
        status, _ = await _chat(http, url, _body(IMG))  # the same image: encoder cache hit
        stats = await _stats(http, url)
        assert (stats["images_encoded"], stats["encoder_cache_hits"]) == (1, 1)


async def test_a_producer_answers_ec_transfer_params_and_a_consumer_pulls_instead() -> None:
    async with (
        running_sim(SimConfig(**CFG, ec_role="ec_producer")) as e_url,
        running_sim(SimConfig(**CFG, ec_role="ec_consumer")) as lm_url,
        aiohttp.ClientSession() as http,
    ):
        status, answer = await _chat(http, e_url, {**_body(IMG), "max_tokens": 1})
        assert status == 200 and answer["usage"]["completion_tokens"] == 1
        params = answer["ec_transfer_params"]
        entry = params[mm_hash(IMG)]
        assert entry["do_remote_encode"] is True and entry["num_encoder_tokens"] == 100
        assert entry["remote_port"] == int(e_url.rsplit(":", 1)[1])
        assert (await _stats(http, e_url))["steps"] == 0  # no language-model work there

        status, _ = await _chat(http, lm_url, _body(IMG, ec_transfer_params=params))
        assert status == 200
        stats = await _stats(http, lm_url)
        assert (stats["images_received"], stats["images_encoded"]) == (1, 0)
        # an image without parameters (the encoder was skipped) is encoded locally
        status, _ = await _chat(http, lm_url, _body("data:image/png;base64,BBBB"))
        assert status == 200 and (await _stats(http, lm_url))["images_encoded"] == 1

        status, answer = await _chat(http, lm_url, _body(IMG, ec_transfer_params="x"))
        assert status == 400 and answer["error"]["param"] == "ec_transfer_params"
        status, answer = await _chat(http, e_url, _body(IMG, stream=True))
        assert status == 400 and answer["error"]["param"] == "stream"
