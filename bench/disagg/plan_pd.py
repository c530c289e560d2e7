"""`fleetgate plan pd` against the simulator: the planned prefill/decode split, run.

1. One simulated engine with the timing of ``bench/disagg/pd.py`` is measured with the engine
   probe (`fleetgate.plan.engine_probe`), as an operator would measure one real engine.
2. `size_pd` sizes the pools for the workload of ``pd.py`` (``--rate`` requests/s,
   ``--length``-token prompts of which 3/4 are shared documents, ``--max-tokens`` outputs) and
   the targets ``--ttft-ms`` (p90) and ``--itl-ms``. ``pd.py`` empties the prefix caches
   before each run of ``--requests`` requests, so each of the ``--docs`` documents is cold once
   per run on the prefill pool: the planner is told that ``--docs / --requests`` of the
   prefills find nothing cached (``cold_fraction``), the others 3/4 of their prompt.
3. That split, and the split with one prefill engine fewer, are run through the gateway with
   ``pd.py``'s workload (``strategy: pd-disagg``); measured TTFT p90 and ITL p90 (median of
   ``--runs`` runs) are printed beside the prediction.

    python bench/disagg/plan_pd.py [--runs 5] [--write-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import sim_fleet, write_section  # noqa: E402
from pd import run_mode  # noqa: E402

from fleetgate.plan.engine_probe import probe_engine  # noqa: E402
from fleetgate.plan.pd import PdWorkload, size_pd  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=8.0)
    p.add_argument("--length", type=int, default=8192)
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--ttft-ms", type=float, default=700.0)
    p.add_argument("--itl-ms", type=float, default=15.0)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--prefill-ms", type=float, default=0.05)
    p.add_argument("--decode-ms", type=float, default=10.0)
    p.add_argument("--chunk", type=int, default=2048)
    p.add_argument("--kv-blocks", type=int, default=8192)
    p.add_argument("--docs", type=int, default=4)
    p.add_argument("--write-docs", action="store_true")
    args = p.parse_args(argv)
    timing = ("--prefill-ms-per-token", str(args.prefill_ms), "--decode-ms-per-step",
              str(args.decode_ms), "--max-num-batched-tokens", str(args.chunk),
              "--max-model-len", "65536", "--output-len", "64")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        with sim_fleet(1, Path(tmp), kv_blocks=args.kv_blocks, events=False, extra=timing) as one:
            speed = asyncio.run(probe_engine(f"{one[0].url}/v1", "tiny", long_tokens=4000))
        work = PdWorkload(rate=args.rate, prompt_tokens=args.length,
                          output_tokens=args.max_tokens, cached_fraction=0.75,
                          cold_fraction=args.docs / args.requests, ttft_ms=args.ttft_ms,
                          itl_ms=args.itl_ms)  # fmt: skip
        plan = size_pd(work, speed)
        print(plan, flush=True)
        rows = []
        prefill, decode = plan["prefill_engines"], plan["decode_engines"]
        for pre in sorted({prefill, max(1, prefill - 1)}, reverse=True):
            args.engines, args.prefill = pre + decode, pre
            measured = run_mode("pd", args.length, args, Path(tmp))
            print(pre, decode, measured, flush=True)
            rows.append((pre, measured))
    lines = [
        f"Engine measured by the probe: prefill {speed.prefill_ms_per_token:.4f} ms/token "
        f"(simulated: {args.prefill_ms}), decode step {speed.decode_ms_per_step:.2f} ms "
        f"({args.decode_ms}), +{speed.decode_batch_factor:.4f} per running sequence (0.01), "
        f"{speed.request_overhead_ms:.1f} ms a request beyond compute (0). "
        f"Workload: {args.rate:g} requests/s, {args.length}-token prompts (3/4 shared documents, "
        f"each cold once per run: {work.cold_fraction:.0%} of prefills find nothing cached), "
        f"{args.max_tokens} output tokens; targets TTFT p90 "
        f"{args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms. Planned: {prefill} prefill + {decode} "
        f"decode (predicted TTFT p90 {plan['predicted_ttft_ms']} ms, ITL "
        f"{plan['predicted_itl_ms']} ms). Measured through the gateway (`pd-disagg`), "
        f"median of {args.runs} runs:",
        "",
        "| split | TTFT p90 | ITL p90 | meets TTFT target |",
        "|---|---|---|---|",
    ]
    for pre, m in rows:
        note = " (planned)" if pre == prefill else " (one prefill engine fewer)"
        meets = "yes" if m["ttft_p90"] * 1000 <= args.ttft_ms else "no"
        lines.append(
            f"| {pre}P+{decode}D{note} | {m['ttft_p90'] * 1000:.0f} ms | "
            f"{m['itl_p90'] * 1000:.1f} ms | {meets} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.write_docs:
        write_section("Planned PD split vs measured (fleetgate plan pd)", table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
