"""Time to first audio: phrase-by-phrase speech while the text streams vs speaking the whole
reply at the end (same run, same simulator, same TTS backend).

    PYTHONPATH=src:. python bench/multimodal/tts_first_audio.py --requests 6

For each request: ``streamed`` = when the first ``delta.audio`` chunk arrived through the
gateway; ``at the end`` = when the text was complete plus the time to synthesise the whole reply
(espeak-ng, measured right after) -- what a client gets from a gateway that waits for the full
answer. Prints medians and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp
from bench.multimodal.common import gateway, timed_stream

from fleetgate.multimodal.speech.espeak import EspeakSynthesizer
from fleetgate.sim import SimConfig, running_sim


async def main(requests: int, output_len: int, decode_ms: float) -> None:
    sim = SimConfig(mode="random", decode_ms_per_step=decode_ms, output_len=output_len, seed=7)
    tts = EspeakSynthesizer()
    streamed: list[float] = []
    at_end: list[float] = []
    async with running_sim(sim) as sim_url:
        dep = {"provider": "openai", "model": "tiny", "api_base": f"{sim_url}/v1"}
        config = {
            "models": [{"alias": "tiny", "deployments": [dep]}],
            "tenancy": {"enabled": False},
        }
        async with gateway(config) as url, aiohttp.ClientSession() as session:
            for i in range(requests):
                body = {
                    "model": "tiny",
                    "stream": True,
                    "max_tokens": output_len,
                    "modalities": ["text", "audio"],
                    "audio": {"voice": "alloy", "format": "pcm16"},
                    "messages": [{"role": "user", "content": f"Tell me story {i}."}],
                }
                t = await timed_stream(session, url, body)
                assert t.first_audio is not None and t.last_text is not None
                started = time.perf_counter()
                await tts.synthesize("".join(t.text), voice="alloy")
                whole = time.perf_counter() - started
                streamed.append(t.first_audio)
                at_end.append(t.last_text + whole)
                print(
                    f"request {i}: first audio {t.first_audio * 1000:7.1f} ms, text complete "
                    f"{t.last_text * 1000:7.1f} ms, whole-reply TTS {whole * 1000:6.1f} ms"
                )
    await tts.aclose()
    s, e = statistics.median(streamed), statistics.median(at_end)
    print(f"\ntime to first audio (median of {requests}, {output_len}-token replies):")
    print(f"  streamed phrases      {s * 1000:8.1f} ms")
    print(f"  synthesised at end    {e * 1000:8.1f} ms")
    print(f"  ratio end/streamed    {e / s:8.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--output-len", type=int, default=120)
    parser.add_argument("--decode-ms", type=float, default=20.0)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.output_len, args.decode_ms))
