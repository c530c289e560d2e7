"""Finding 11 of issue #31, measured on a real gateway process: a 91 KiB FLAC declaring
192 kHz x 8 channels x 60 s is refused with the resident memory of the gateway's process tree
(the gateway and its audio worker processes) up by less than 20 MB, one at a time or ten at once.
"""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import soundfile as sf
from tests.multimodal.audio.conftest import declared_flac
from tests.procs import serve_process

MASTER = "sk-audio-memory"
MB = 1_000_000


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (from /proc)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            status = Path(f"/proc/{p}/status").read_text()
            tasks = os.listdir(f"/proc/{p}/task")
        except FileNotFoundError:  # it ended while being read
            continue
        total += next(int(line.split()[1]) * 1024 for line in status.splitlines()
                      if line.startswith("VmRSS:"))  # fmt: skip
        for task in tasks:
            try:
                todo += [
                    int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()
                ]
            except FileNotFoundError:
                pass
    return total


def silence_wav() -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.zeros(16_000, np.float32), 16_000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


async def _transcribe(session: aiohttp.ClientSession, url: str, audio: bytes) -> tuple[int, Any]:
    form = aiohttp.FormData()
    form.add_field("model", "whisper-1")
    form.add_field("file", audio, filename="audio", content_type="application/octet-stream")
    headers = {"Authorization": f"Bearer {MASTER}"}
    async with session.post(f"{url}/v1/audio/transcriptions", data=form, headers=headers) as r:
        return r.status, await r.json()


def test_a_small_flac_declaring_8_channels_at_192_khz_costs_the_process_tree_under_20_mb(
    tmp_path: Path,
) -> None:
    flac = declared_flac(192_000, 8, 60)
    assert len(flac) < 100 * 1024
    config = {
        "models": [{"alias": "tiny", "deployments": [
            {"provider": "openai", "model": "m", "api_base": "http://127.0.0.1:9/v1"}]}],
        "tenancy": {"enabled": False},
    }  # fmt: skip

    async def run(url: str, pid: int) -> None:
        async with aiohttp.ClientSession() as session:
            warm = await _transcribe(session, url, silence_wav())
            assert warm == (200, {"text": ""})
            before = tree_rss(pid)
            status, body = await _transcribe(session, url, flac)
            assert status == 400 and body["error"]["code"] == "audio_too_large", body
            one = tree_rss(pid) - before
            ten = await asyncio.gather(*(_transcribe(session, url, flac) for _ in range(10)))
            assert {s for s, _ in ten} == {400}
            after_ten = tree_rss(pid) - before
        assert one < 20 * MB, f"the process tree grew by {one / MB:.1f} MB"
        assert after_ten < 20 * MB, f"the process tree grew by {after_ten / MB:.1f} MB"

    with serve_process(config, tmp_path, master_key=MASTER) as (url, proc):
        asyncio.run(run(url, proc.pid))
