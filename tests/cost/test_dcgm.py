"""Reading dcgm-exporter's exposition."""

from __future__ import annotations

from fleetgate.cost.dcgm import parse_dcgm

H100 = 'modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"'
A = f'gpu="0",UUID="GPU-aaa",device="nvidia0",{H100}'
B = f'gpu="1",UUID="GPU-bbb",device="nvidia1",{H100}'
TEXT = f"""\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{{A},container="vllm",namespace="llm",pod="chat-0"}} 87
DCGM_FI_DEV_GPU_UTIL{{{B}}} 0
DCGM_FI_DEV_FB_USED{{{A}}} 73400
DCGM_FI_DEV_FB_FREE{{{A}}} 8159
DCGM_FI_DEV_POWER_USAGE{{{B}}} 71.5
DCGM_FI_DEV_SM_CLOCK{{gpu="0",UUID="GPU-aaa"}} 1980
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="2",UUID="GPU-ccc",Hostname="node-2"}} 0.25
DCGM_FI_DEV_GPU_UTIL{{gpu="3",UUID="GPU-ddd"}} NaN
vllm:num_requests_running{{model_name="x"}} 3
garbage line
"""


def test_parse_dcgm_groups_series_by_gpu() -> None:
    gpus = {g.uuid: g for g in parse_dcgm(TEXT)}
    assert set(gpus) == {"GPU-aaa", "GPU-bbb", "GPU-ccc"}  # GPU-ddd only had a NaN
    a = gpus["GPU-aaa"]
    assert (a.util_pct, a.fb_used_mib, a.fb_free_mib, a.host, a.pod) == (
        87.0, 73400.0, 8159.0, "node-1", "chat-0"
    )  # fmt: skip
    assert a.model == "NVIDIA H100 80GB HBM3" and a.gpu == "0"
    assert gpus["GPU-bbb"].util_pct == 0.0 and gpus["GPU-bbb"].power_w == 71.5
    # without DCGM_FI_DEV_GPU_UTIL the profiling ratio stands in, as a percentage
    assert gpus["GPU-ccc"].util_pct == 25.0


def test_gpu_without_uuid_is_keyed_by_index_and_host() -> None:
    (gpu,) = parse_dcgm('DCGM_FI_DEV_GPU_UTIL{gpu="4",Hostname="n"} 12\n')
    assert gpu.uuid == "gpu4@n" and gpu.util_pct == 12.0
    assert parse_dcgm("") == []
