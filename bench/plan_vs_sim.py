"""Does a plan calibrated by bench predict the fleet's TTFT P95 at a higher load?

Runs fleetgate's simulator (its own process, continuous batching, ``--max-num-seqs`` slots),
calibrates from two bench points (one user; saturation), predicts TTFT P95 at
``--load-fraction`` of the saturation throughput with the discrete-event simulation
(``fleetgate.plan.des``) and with Erlang-C, then measures that load with bench (open loop,
Poisson) and prints measured / predicted. Pass: the DES prediction within 20 %.

    PYTHONPATH=src .venv/bin/python bench/plan_vs_sim.py
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import sys
from typing import Any

from fleetgate.bench import LoadPoint, PointOptions, Target, run_point, synthetic
from fleetgate.bench.lengths import parse_length_dist
from fleetgate.plan import calibrate, ttft_quantile_des, wait_quantile_s
from fleetgate.sim import SimConfig, start_sim


def _sim(config: SimConfig, urls: Any, stop: Any) -> None:
    import uvloop

    async def main() -> None:
        runner, url = await start_sim(config)
        urls.put(url)
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await runner.cleanup()

    uvloop.run(main())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-num-seqs", type=int, default=4)
    ap.add_argument("--load-fraction", type=float, default=0.8)
    ap.add_argument("--requests", type=int, default=400)
    args = ap.parse_args()
    config = SimConfig(
        model="tiny",
        max_num_seqs=args.max_num_seqs,
        prefill_ms_per_token=0.2,
        decode_ms_per_step=4.0,
        seed=1,
    )
    ctx = mp.get_context("spawn")
    urls: Any = ctx.Queue()
    stop = ctx.Event()
    proc = ctx.Process(target=_sim, args=(config, urls, stop), daemon=True)
    proc.start()
    try:
        url = urls.get(timeout=60) + "/v1"
        specs = synthetic(
            args.requests, parse_length_dist("fixed:24"), parse_length_dist("fixed:12"), seed=5
        )
        opts = PointOptions(target=Target(url, model="tiny", ignore_eos=True), pool=specs)
        low = run_point(opts, LoadPoint("concurrency", 1, 40)).summary
        high = run_point(opts, LoadPoint("concurrency", 8 * args.max_num_seqs, 160)).summary
        cal = calibrate({"points": [low, high]}, gpus=1)
        rate = args.load_fraction * float(high["request_throughput"])
        des = 1000 * ttft_quantile_des(
            rate=rate,
            servers=cal.slots_per_gpu,
            service_mean_s=cal.service_time_s,
            service_cv=cal.service_cv,
            base_ttft_mean_s=cal.base_ttft_mean_ms / 1000,
            base_ttft_std_s=cal.base_ttft_std_ms / 1000,
            service_full_s=cal.service_full_s,
        )
        erlang = cal.base_ttft_p95_ms + 1000 * wait_quantile_s(
            cal.slots_per_gpu, rate, cal.service_time_s, 0.95
        )
        measured = run_point(
            opts, LoadPoint("rate", rate, args.requests, arrival="poisson")
        ).summary
    finally:
        stop.set()
        proc.join(10)
    m = float(measured["p95_ttft_ms"])
    print(
        f"calibration: slots={cal.slots_per_gpu} service={cal.service_time_s * 1000:.1f} ms "
        f"full={(cal.service_full_s or 0) * 1000:.1f} ms cv={cal.service_cv:.2f} "
        f"unloaded TTFT p95={cal.base_ttft_p95_ms:.1f} ms "
        f"saturation={high['request_throughput']:.1f} req/s"
    )
    print(
        f"load {rate:.1f} req/s: measured p95 TTFT {m:.1f} ms "
        f"(p99 schedule lag {measured['p99_schedule_lag_ms']:.2f} ms)"
    )
    print(f"  DES prediction      {des:.1f} ms  measured/predicted {m / des:.3f}")
    print(f"  Erlang-C prediction {erlang:.1f} ms  measured/predicted {m / erlang:.3f}")
    ok = abs(m / des - 1) <= 0.20
    print("PASS" if ok else "FAIL", "(DES within 20%)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
