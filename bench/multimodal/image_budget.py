"""Image compute budget: text-only TTFT under five-image requests, budget on vs off (same run).

    PYTHONPATH=src:. python bench/multimodal/image_budget.py --waves 3

One simulator charges ``--image-tokens`` prompt tokens per image at ``--prefill-ms-per-token``.
Two gateways in front of it differ only in ``multimodal.images.budget.enabled``; the budget
admits one five-image request per deployment at a time (llava estimate: 576 tokens per image).
Each wave sends ``--image-requests`` five-image streams and, 50 ms later, ``--text-requests``
text-only streams; TTFT is the time to the first content chunk. Prints p50/p95 of text-only
TTFT per mode, the p95 ratio, and the five-image requests' TTFT.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import random
from typing import Any

import aiohttp
from bench.multimodal.common import gateway, percentile, timed_stream
from PIL import Image

from fleetgate.sim import SimConfig, running_sim


def _image(rng: random.Random) -> str:
    buf = io.BytesIO()
    color = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
    Image.new("RGB", (64, 48), color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _body(parts: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
    return {
        "model": "vl",
        "stream": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": parts}],
    }


def _config(sim_url: str, budget: bool) -> dict[str, Any]:
    dep = {"provider": "openai", "model": "tiny", "api_base": f"{sim_url}/v1", "name": "vl-0"}
    return {
        "models": [{"alias": "vl", "deployments": [dep]}],
        "tenancy": {"enabled": False},
        "multimodal": {
            "images": {
                "token_family": "llava",
                "budget": {"enabled": budget, "tokens_in_flight": 5 * 576},
            }
        },
    }


async def _wave(
    session: aiohttp.ClientSession, url: str, args: argparse.Namespace, rng: random.Random
) -> tuple[list[float], list[float]]:
    text = "Summarise the plot of a short film in two sentences."
    image_jobs = [
        timed_stream(
            session,
            url,
            _body(
                [{"type": "text", "text": "Describe these."}]
                + [{"type": "image_url", "image_url": {"url": _image(rng)}} for _ in range(5)],
                args.output_len,
            ),  # fmt: skip
        )
        for _ in range(args.image_requests)
    ]
    images = [asyncio.create_task(j) for j in image_jobs]
    await asyncio.sleep(0.05)
    texts = [
        asyncio.create_task(
            timed_stream(session, url, _body([{"type": "text", "text": text}], args.output_len))
        )
        for _ in range(args.text_requests)
    ]
    t_done = await asyncio.gather(*texts)
    i_done = await asyncio.gather(*images)
    return [t.first_text or t.end for t in t_done], [t.first_text or t.end for t in i_done]


async def main(args: argparse.Namespace) -> None:
    sim = SimConfig(
        mode="random",
        image_tokens=args.image_tokens,
        prefill_ms_per_token=args.prefill_ms_per_token,
        decode_ms_per_step=args.decode_ms,
        output_len=args.output_len,
    )
    results: dict[str, tuple[list[float], list[float]]] = {}
    async with aiohttp.ClientSession() as session:
        for seed, (label, budget) in enumerate((("budget off", False), ("budget on", True))):
            # A fresh simulator and new images per mode: nothing is served from a prefix cache.
            rng = random.Random(seed)
            text_ttft: list[float] = []
            image_ttft: list[float] = []
            async with running_sim(sim) as sim_url, gateway(_config(sim_url, budget)) as url:
                for _ in range(args.waves):
                    t, i = await _wave(session, url, args, rng)
                    text_ttft += t
                    image_ttft += i
                    await asyncio.sleep(0.2)
            results[label] = (text_ttft, image_ttft)
    print(f"{'mode':<11} {'text p50':>9} {'text p95':>9} {'image p50':>10} {'image p95':>10}  (ms)")
    for label, (t, i) in results.items():
        print(
            f"{label:<11} {percentile(t, 50) * 1000:9.0f} {percentile(t, 95) * 1000:9.0f} "
            f"{percentile(i, 50) * 1000:10.0f} {percentile(i, 95) * 1000:10.0f}"
        )
    off, on = percentile(results["budget off"][0], 95), percentile(results["budget on"][0], 95)
    print(f"text-only TTFT p95 on/off: {on / off:.2f} (target <= 0.50)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waves", type=int, default=3)
    parser.add_argument("--image-requests", type=int, default=4)
    parser.add_argument("--text-requests", type=int, default=12)
    parser.add_argument("--image-tokens", type=int, default=1200)
    parser.add_argument("--prefill-ms-per-token", type=float, default=0.1)
    parser.add_argument("--decode-ms", type=float, default=10.0)
    parser.add_argument("--output-len", type=int, default=16)
    asyncio.run(main(parser.parse_args()))
