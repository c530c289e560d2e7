"""Input-check latency of the default policy (words, pii, classifier), one prompt at a time.

    PYTHONPATH=src python bench/safety/input_latency.py [--rounds 5] [--prompts 200]

Two classifiers, measured in the same run, interleaved per round:

- ``fp32 (baseline)``: the previous default: sentence-transformers' fp32 MiniLM pipeline and a
  model trained (here, at start, as before) on the hand-written examples;
- ``int8 (default)``: the shipped model over the shared int8 copy of MiniLM
  (`MiniLM.encoder(quantize=True)`, mean and max pooled), what the gateway runs now.

Each round sends ``--prompts`` prompts of the shipped red-team and benign sets (not the
held-out set) one by one through ``policy.run(INPUT, ...)`` and records each call's wall time;
the report is the median over rounds of each round's p50 / p90 / p99, and the ratio of p50s.
``--previous-head FILE`` adds a third variant: the int8 embedder with an earlier shipped head
(``git show cc8b01c:src/fleetgate/safety/data/classifier_head.npz > /tmp/prev.npz``: 4,096
n-gram buckets instead of 16,384). ``--eager`` adds the int8 embedder as it ran before
``MiniLM.encoder`` (the eager module, not the TorchScript trace; same vectors, same head).
``--lang zh`` (or ``en``) keeps only Chinese (English) prompts: with ``--previous-head`` set to
the fifth head of 2026-12-02 (70bde59, raw-text embeddings) it measures what the glosses of the
sixth cost. ``--threads`` sets torch's intra-op threads (process-wide); the gateway's
`MiniLM` loader sets 1 by default (the semantic router's ``threads`` overrides it), so 1 is
what the gateway runs. ``--t2s`` adds the default without the Traditional -> Simplified
folding of issue #38 (`t2s_off.no_t2s`, ``Glosser(simplify=False)``), and ``--prompts-file``
takes the prompts from a JSONL file's ``prompt`` fields instead (e.g. the Chinese rows of the
already-read fifth blind set, with ``--lang zh``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from t2s_off import no_t2s

from fleetgate.resources import MiniLM, MiniLMEmbedder
from fleetgate.resources.minilm import Vectors, _tokenizer, mean_pooled
from fleetgate.safety import Guardrails, SafetyConfig
from fleetgate.safety.base import CheckContext, CheckPoint
from fleetgate.safety.checks.classifier import ClassifierCheck
from fleetgate.safety.classifier.gloss import Glosser
from fleetgate.safety.normalize import is_cjk
from fleetgate.safety.policy import Policy
from fleetgate_training.classifier import legacy_examples
from fleetgate_training.safety import shipped_set


class EagerInt8(MiniLMEmbedder):
    """The shared int8 copy run as the eager module (the default before `MiniLM.encoder`)."""

    def encode(self, texts: Sequence[str]) -> Vectors:
        if self._tokenizer is None:
            self._tokenizer = _tokenizer(self._max_tokens)
        module = self.minilm.transformer(quantize=True)

        def eager(ids: object, mask: object) -> object:
            return module(input_ids=ids, attention_mask=mask).last_hidden_state

        return mean_pooled(eager, self._tokenizer, texts, with_max=self.with_max)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_round(policy: Policy, prompts: Sequence[str]) -> list[float]:
    out = []
    for prompt in prompts:
        t0 = time.perf_counter()
        await policy.run(CheckPoint.INPUT, prompt, CheckContext(stage=CheckPoint.INPUT))
        out.append((time.perf_counter() - t0) * 1000)
    return out


def load_prompts(path: Path | None, lang: str) -> list[str]:
    """The shipped red-team and benign prompts, or the ``prompt`` fields of a JSONL file."""
    if path is not None:
        lines = path.read_text("utf-8").splitlines()
        texts = [str(json.loads(line)["prompt"]) for line in lines if line.strip()]
    else:
        texts = [p.prompt for p in shipped_set("redteam") + shipped_set("benign")]
    return [t for t in texts if lang == "all" or (lang == "zh") == is_cjk(t)]


async def build(
    name: str, embedder: MiniLMEmbedder, args: argparse.Namespace
) -> tuple[ClassifierCheck, Policy]:
    """One variant's classifier check, warmed up, and the default policy around it."""
    if name == "int8 (previous head)":
        check = ClassifierCheck(embedder=embedder, model_path=args.previous_head)
    elif name == "int8, no T->S (before #38)":
        with no_t2s():  # the word list's and the classifier's normalisers are built here
            check = ClassifierCheck(embedder=embedder, glosser=Glosser(simplify=False))
            await check.warm_up()
            return check, Guardrails(SafetyConfig(), checks={"classifier": check}).policy("default")
    elif embedder.quantize:
        check = ClassifierCheck(embedder=embedder)
    else:
        check = ClassifierCheck(
            embedder=embedder, examples=legacy_examples(), cache_path=args.baseline_cache
        )
    await check.warm_up()
    return check, Guardrails(SafetyConfig(), checks={"classifier": check}).policy("default")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (the gateway: 1; 0: torch's default)")  # fmt: skip
    ap.add_argument("--baseline-cache", type=Path,
                    default=Path(tempfile.gettempdir()) / "fleetgate-bench-fp32-classifier.npz",
                    help="where the baseline's model is trained once and reused")  # fmt: skip
    ap.add_argument("--previous-head", type=Path, help="an earlier classifier_head.npz")
    ap.add_argument("--eager", action="store_true", help="add the eager int8 module as a variant")
    ap.add_argument("--lang", choices=("all", "en", "zh"), default="all",
                    help="English or Chinese prompts only (zh: the glosses' cost)")  # fmt: skip
    ap.add_argument("--t2s", action="store_true",
                    help="add the default without Traditional -> Simplified folding")  # fmt: skip
    ap.add_argument("--prompts-file", type=Path, help="JSONL whose 'prompt' fields are sent")
    args = ap.parse_args()
    import torch

    prompts = load_prompts(args.prompts_file, args.lang)[: args.prompts]
    # one loader: both variants share its weights (and its thread setting), as in the gateway
    minilm = MiniLM(threads=args.threads or None)
    int8 = MiniLMEmbedder(minilm, quantize=True, with_max=True)
    variants = {"fp32 (baseline)": MiniLMEmbedder(minilm), "int8 (default)": int8}
    if args.previous_head is not None:
        variants["int8 (previous head)"] = int8
    if args.eager:
        variants["int8 eager (before the trace)"] = EagerInt8(minilm, quantize=True, with_max=True)
    if args.t2s:
        variants["int8, no T->S (before #38)"] = int8
    policies: dict[str, Policy] = {}
    checks = []
    for name, embedder in variants.items():
        check, policies[name] = await build(name, embedder, args)
        checks.append(check)
        await one_round(policies[name], prompts[:20])  # warm caches and allocators
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in policies}
    for r in range(args.rounds):
        order = list(policies) if r % 2 == 0 else list(reversed(policies))  # interleaved
        for name in order:
            times = await one_round(policies[name], prompts)
            results[name].append(
                (percentile(times, 0.5), percentile(times, 0.9), percentile(times, 0.99))
            )
    print(f"{len(prompts)} prompts x {args.rounds} rounds, torch threads {torch.get_num_threads()}")
    print("| classifier embedder | input check p50 | p90 | p99 | p50 per round |")
    print("| --- | ---: | ---: | ---: | --- |")
    p50s = {}
    for name, rows in results.items():
        p50s[name] = statistics.median(r[0] for r in rows)
        p90 = statistics.median(r[1] for r in rows)
        p99 = statistics.median(r[2] for r in rows)
        per_round = ", ".join(f"{r[0]:.1f}" for r in rows)
        print(f"| {name} | {p50s[name]:.1f} ms | {p90:.1f} ms | {p99:.1f} ms | {per_round} |")
    base, new = p50s["fp32 (baseline)"], p50s["int8 (default)"]
    print(f"p50 ratio int8/fp32: {new / base:.2f}")
    if "int8 eager (before the trace)" in p50s:
        print(f"p50 ratio traced/eager: {new / p50s['int8 eager (before the trace)']:.2f}")
    if "int8, no T->S (before #38)" in p50s:
        print(f"p50 ratio default/no T->S: {new / p50s['int8, no T->S (before #38)']:.2f}")
    if "int8 (previous head)" in p50s:
        print(f"p50 ratio default/previous head: {new / p50s['int8 (previous head)']:.2f}")
    for check in checks:
        check.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
