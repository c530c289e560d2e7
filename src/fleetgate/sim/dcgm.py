"""A DCGM-exporter-shaped ``/dcgm/metrics`` endpoint: the simulated engine's GPU, as NVIDIA's
``dcgm-exporter`` would show it, for testing GPU cost reports without a GPU.

Series (names, units and labels as dcgm-exporter's default counters; one GPU, ``gpu="0"``)::

    DCGM_FI_DEV_GPU_UTIL           %     0 when nothing runs, else 30 + 70 * running/max_num_seqs
    DCGM_FI_PROF_GR_ENGINE_ACTIVE  0..1  the same as a ratio
    DCGM_FI_DEV_FB_USED            MiB   90 % of an 80 GB card: vLLM reserves it idle or not
    DCGM_FI_DEV_FB_FREE            MiB   the rest
    DCGM_FI_DEV_POWER_USAGE        W     70 idle, up to 700

Every series carries ``gpu``, ``UUID``, ``device``, ``modelName`` and ``Hostname`` labels; the
UUID is derived from the simulator's port so that two simulators are two GPUs.
"""

from __future__ import annotations

import hashlib

from aiohttp import web

from fleetgate.sim.state import SIM_STATE

__all__ = ["dcgm_metrics", "gpu_utilisation"]

FB_TOTAL_MIB = 81559.0
_SERIES = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
)


def gpu_utilisation(running: int, max_num_seqs: int) -> float:
    """The simulated ``DCGM_FI_DEV_GPU_UTIL`` (percent) of a batch of ``running`` sequences."""
    if running <= 0:
        return 0.0
    return min(100.0, 30.0 + 70.0 * running / max(1, max_num_seqs))


async def dcgm_metrics(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    util = gpu_utilisation(len(state.engine.running), state.config.max_num_seqs)
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    port = sock[1] if isinstance(sock, tuple) and len(sock) > 1 else 0
    uuid = "GPU-" + hashlib.sha1(f"{state.config.model}:{port}".encode()).hexdigest()[:32]
    labels = (
        f'gpu="0",UUID="{uuid}",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
        f'Hostname="fleetgate-sim",DCGM_FI_DRIVER_VERSION="550.54.15"'
    )
    used = 0.9 * FB_TOTAL_MIB
    values = (util, util / 100.0, used, FB_TOTAL_MIB - used, 70.0 + 6.3 * util)
    lines = []
    for (name, kind, help_text), value in zip(_SERIES, values, strict=True):
        lines += [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} {kind}",
            f"{name}{{{labels}}} {value:g}",
        ]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
