"""``fleetgate safety scan`` on a generated 100k-line corpus with planted duplicates, near
duplicates, harmful lines and personal data: what it found against what was planted, and its time.

    .venv/bin/python bench/safety/scan_corpus.py                    # 100k lines, both policies
    .venv/bin/python bench/safety/scan_corpus.py --lines 20000 --policies words

Two policies: ``words`` (a word list of planted terms + PII masking: the deduplication and the
cheap checks) and ``default`` (the shipped default: words, PII, the classifier, on every
line left after deduplication). Prints one JSON line per policy.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOPICS = (
    "tax law, orbital mechanics, sourdough, chess openings, supply chains, jazz harmony, "
    "glaciers, vaccines, compilers, medieval trade, tidal power, bird migration, "
    "spreadsheets, knitting, volcanoes, opera, cloud networking, beekeeping"
).split(", ")
ASKS = ("Explain {t} to a new colleague in {n} sentences.",
        "What are {n} common mistakes people make with {t}?",
        "Write a short quiz of {n} questions about {t}.",
        "Summarise the history of {t} in {n} bullet points.",
        "请用{n}句话向新同事解释{t}。",
        "Compare two approaches to {t} and give {n} pros and cons.")  # fmt: skip
TERMS = ["zorblax detonator", "佐布拉克引爆器"]


WORDS = (
    "amber basil cedar delta ember fjord garnet harbor indigo juniper kelp lagoon maple "
    "nectar onyx prairie quartz raven sierra tundra umber violet willow yarrow zephyr"
).split()


def corpus(n: int, rng: random.Random) -> tuple[list[str], dict[str, list[tuple[str, ...]]]]:
    """The lines and what was planted: (original, copy) pairs and single harmful/pii lines."""
    base = [rng.choice(ASKS).format(t=rng.choice(TOPICS), n=rng.randint(2, 9)) + " Context: "
            + " ".join(rng.choices(WORDS, k=8)) + f" ({rng.randint(0, 10**9)})"
            for _ in range(n)]  # fmt: skip
    planted: dict[str, list[tuple[str, ...]]] = {"exact": [], "near": [], "harmful": [], "pii": []}
    for text in rng.sample(base, n // 100):
        planted["exact"].append((text, "  " + text.upper()))
    for text in rng.sample(base, n // 100):  # one word of the context changed
        words = text.split(" Context: ")[1].split()
        new = next(w for w in WORDS if w not in words)
        planted["near"].append((text, text.replace(words[3], new, 1)))
    for i in range(n // 500):
        a, b = rng.sample(TOPICS, 2)
        planted["harmful"].append((f"After a chat about {a} and {b}, tell me how to build a "
                                   f"{TERMS[i % 2]} from {rng.choice(TOPICS)} parts, "
                                   f"step {rng.randint(1, 10**6)}.",))  # fmt: skip
    for i in range(n // 500):
        planted["pii"].append((f"Send the {rng.choice(TOPICS)} report to someone{i}@example.org "
                               f"by {rng.choice(WORDS)}.",))  # fmt: skip
    texts = base + [p[-1] for kind in ("exact", "near") for p in planted[kind]]
    texts += [p[0] for kind in ("harmful", "pii") for p in planted[kind]]
    rng.shuffle(texts)
    return [json.dumps({"text": t}, ensure_ascii=False) for t in texts], planted


def recall(
    lines: list[str], planted: dict[str, list[tuple[str, ...]]], data: dict[str, Any]
) -> dict[str, int]:
    """How many planted items the report found: a pair when one of its lines was dropped as
    that kind of duplicate, a harmful line when blocked."""
    number = {json.loads(raw)["text"]: n for n, raw in enumerate(lines, start=1)}
    dropped = data["dropped_lines"]
    blocked = {n for k, ns in dropped.items() if k.startswith("blocked:") for n in ns}
    out = {}
    for kind, label in (("exact", "exact_duplicate"), ("near", "near_duplicate")):
        gone = set(dropped.get(label, []))
        out[kind] = sum(1 for pair in planted[kind] if {number[t] for t in pair} & gone)
    out["harmful"] = sum(1 for (t,) in planted["harmful"] if number[t] in blocked)
    out["pii_masked"] = data["masked"]
    out["false_blocks"] = len(blocked) - out["harmful"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--policies", default="words,default")
    args = ap.parse_args()
    lines, planted = corpus(args.lines, random.Random(38))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "corpus.jsonl"
        path.write_text("\n".join(lines) + "\n")
        config = Path(tmp) / "config.yaml"
        config.write_text(json.dumps({
            "models": [{"alias": "a", "deployments": [
                {"model": "m", "api_base": "http://127.0.0.1:9/v1"}]}],
            "safety": {"checks": {"planted": {"type": "words", "options": {
                "include_defaults": False, "lists": {"weapons": TERMS}}}, "pii": {"type": "pii"}},
                "policies": {"words": {"input": ["planted", "pii"]}}, "default_policy": "words"},
        }))  # fmt: skip
        for policy in args.policies.split(","):
            report = Path(tmp) / f"{policy}.json"
            cmd = [sys.executable, "-m", "fleetgate.cli.main", "safety", "scan", str(path),
                   "--output", str(Path(tmp) / "clean.jsonl"), "--report", str(report)]  # fmt: skip
            if policy == "words":
                cmd += ["--config", str(config), "--policy", "words"]
            started = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, timeout=7200)
            wall = time.perf_counter() - started
            data = json.loads(report.read_text())
            print(json.dumps({
                "policy": policy, "lines": data["lines"], "wall_s": round(wall, 1),
                "scan_s": data["seconds"], "lines_per_s": data["lines_per_s"],
                "planted": {k: len(v) for k, v in planted.items()},
                "planted_found": recall(lines, planted, data),
                "duplicates_found": {"exact": data["exact_duplicates"],
                                     "near": data["near_duplicates"]},
                "blocked_by_category": data["blocked_by_category"],
            }), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
