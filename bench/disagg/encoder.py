"""Encoder pool vs aggregated serving on an image-heavy workload, at equal engine count.

Two fleets of ``--engines`` simulated engines each, in one run: *aggregated* (every engine
encodes its requests' images itself, inside its scheduler step, so the running batch waits) and
*encoder pool* (``--encoders`` engines tagged ``encoder`` started as vLLM's ``ec_producer``,
the rest ``ec_consumer``: the gateway sends each image to the encoder pool first, then the
request with the encoder's ``ec_transfer_params`` to a language-model engine, which pulls the
outputs at ``--ec-transfer-ms`` per image token). Engine timing: ``--encode-ms`` per image token
to encode, ``--prefill-ms`` per prompt token (images count ``--image-tokens`` each),
``--decode-ms`` per decode step.

Workload: Poisson arrivals at ``--rate`` requests/s, ``--requests`` streamed chat requests, each
with 1-``--images`` new images (PNG, processed by the gateway) and a short question,
``--max-tokens`` output tokens. TTFT (p50, p90) and ITL (p99: an encode stalls one step of
the batch) are measured by the client through the gateway, per run; median of ``--runs`` runs.
The gateway's own image pipeline is off in both fleets (the encoder step reads the image
parts as sent).

    python bench/disagg/encoder.py [--runs 5] [--rates 4,8] [--write-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import random
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MASTER, gateway_process, sim_fleet, write_section  # noqa: E402
from pd import _pct, poisson_replay  # noqa: E402


def _png(rng: random.Random) -> str:
    buf = io.BytesIO()
    color = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
    Image.new("RGB", (32, 32), color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _bodies(args: argparse.Namespace, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(args.requests):
        parts: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": _png(rng)}}
            for _ in range(rng.randint(1, args.images))
        ]
        parts.append({"type": "text", "text": f"Request {seed}-{i}: what is in these pictures?"})
        messages = [{"role": "user", "content": parts}]
        out.append({"model": "vl", "stream": True, "max_tokens": args.max_tokens,
                    "ignore_eos": True, "messages": messages})  # fmt: skip
    return out


async def _replay(
    base: str, bodies: list[dict[str, Any]], rate: float, seed: int
) -> dict[str, float]:
    ttfts, gaps, errors = await poisson_replay(base, bodies, rate, seed)
    return {"ttft_p50": _pct(ttfts, 0.5), "ttft_p90": _pct(ttfts, 0.9),
            "itl_p99": _pct(gaps, 0.99), "errors": errors}  # fmt: skip


def _config(mode: str, urls: list[str], args: argparse.Namespace) -> dict[str, Any]:
    deployments = []
    for i, url in enumerate(urls):
        dep: dict[str, Any] = {"model": "tiny", "api_base": f"{url}/v1", "name": f"e{i}"}
        if mode == "encoder" and i < args.encoders:
            dep["tags"] = ["encoder"]
        deployments.append(dep)
    return {
        "models": [{"alias": "vl", "strategy": "least-load", "deployments": deployments,
                    "num_retries": 0}],
        "server": {"access_log": False},
        "tenancy": {"enabled": False},
        # the gateway's image pipeline is off: its decode cost (the same in both fleets) is not
        # what is measured; the encoder step reads the image parts either way
        "multimodal": {"enabled": False},
        "router": {"timeouts": {"first_token": 120, "total": 170}},
    }  # fmt: skip


def run_mode(mode: str, rate: float, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    timing = ["--prefill-ms-per-token", str(args.prefill_ms),
              "--decode-ms-per-step", str(args.decode_ms),
              "--encode-ms-per-image-token", str(args.encode_ms),
              "--ec-transfer-ms-per-token", str(args.ec_transfer_ms),
              "--image-tokens", str(args.image_tokens),
              "--output-len", str(args.max_tokens)]  # fmt: skip
    runs = []
    with ExitStack() as stack:
        urls = []
        if mode == "encoder":
            role = '{"ec_role": "ec_producer"}'
            enc = sim_fleet(args.encoders, tmp, kv_blocks=8192, events=False,
                            extra=(*timing, "--ec-transfer-config", role))  # fmt: skip
            urls += [s.url for s in stack.enter_context(enc)]
            role = '{"ec_role": "ec_consumer"}'
            lm = sim_fleet(args.engines - args.encoders, tmp, kv_blocks=8192, events=False,
                           extra=(*timing, "--ec-transfer-config", role), seed=1)  # fmt: skip
            urls += [s.url for s in stack.enter_context(lm)]
        else:
            fleet = sim_fleet(args.engines, tmp, kv_blocks=8192, events=False, extra=tuple(timing))
            urls += [s.url for s in stack.enter_context(fleet)]
        base = stack.enter_context(gateway_process(_config(mode, urls, args), tmp, MASTER))
        for r in range(args.runs):
            runs.append(asyncio.run(_replay(base, _bodies(args, seed=r * 7 + int(rate)), rate, r)))
            print(mode, rate, r, {k: round(v, 4) for k, v in runs[-1].items()}, flush=True)
    out = {
        k: statistics.median(run[k] for run in runs) for k in ("ttft_p50", "ttft_p90", "itl_p99")
    }
    out["errors"] = sum(run["errors"] for run in runs)
    return out


def _table(results: dict[float, dict[str, dict[str, float]]], args: argparse.Namespace) -> str:
    lm = args.engines - args.encoders
    lines = [
        f"{args.engines} simulated engines per fleet (encoder pool: {args.encoders} encoder + "
        f"{lm} language-model); images of {args.image_tokens} tokens, encode "
        f"{args.encode_ms} ms/image token, encoder-output pull {args.ec_transfer_ms} ms/token, "
        f"prefill {args.prefill_ms} ms/token, decode step {args.decode_ms} ms; {args.requests} "
        f"streamed requests per run (Poisson), 1-{args.images} new images each, "
        f"{args.max_tokens} output tokens; per run TTFT p50/p90 and ITL p99, median of "
        f"{args.runs} runs.",
        "",
        "| load | aggregated TTFT p50 / p90 | encoder pool TTFT p50 / p90 | pool / agg TTFT p90 "
        "| aggregated ITL p99 | encoder pool ITL p99 | errors (agg, pool) |",
        "|---|---|---|---|---|---|---|",
    ]
    for rate in sorted(results):
        agg, enc = results[rate]["aggregated"], results[rate]["encoder"]
        lines.append(
            f"| {rate:g} req/s | {agg['ttft_p50'] * 1000:.0f} / {agg['ttft_p90'] * 1000:.0f} ms "
            f"| {enc['ttft_p50'] * 1000:.0f} / {enc['ttft_p90'] * 1000:.0f} ms "
            f"| {enc['ttft_p90'] / agg['ttft_p90']:.2f}x | {agg['itl_p99'] * 1000:.1f} ms "
            f"| {enc['itl_p99'] * 1000:.1f} ms | {agg['errors']:.0f}, {enc['errors']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="4,8")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--engines", type=int, default=3)
    p.add_argument("--encoders", type=int, default=1)
    p.add_argument("--images", type=int, default=2)
    p.add_argument("--image-tokens", type=int, default=1200)
    p.add_argument("--encode-ms", type=float, default=0.05)
    p.add_argument("--ec-transfer-ms", type=float, default=0.001)
    p.add_argument("--prefill-ms", type=float, default=0.05)
    p.add_argument("--decode-ms", type=float, default=10.0)
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--write-docs", action="store_true")
    args = p.parse_args(argv)
    results: dict[float, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rate in [float(x) for x in args.rates.split(",")]:
            results[rate] = {
                m: run_mode(m, rate, args, Path(tmp)) for m in ("aggregated", "encoder")
            }
    table = _table(results, args)
    print(table)
    if args.write_docs:
        split = f"{args.encoders}E+{args.engines - args.encoders}LM"
        title = f"Encoder pool vs aggregated, image-heavy, {split}"
        write_section(title, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
