"""``fleetgate safety eval``: run red-team and benign prompt sets through a gateway.

The command is tooling: this distribution registers it with the ``fleetgate`` command through
the ``fleetgate.cli`` entry point ``safety`` (`register`), which `fleetgate.cli.safety` finds.

A prompt counts as blocked when the gateway answers 400 with error code ``content_filter`` or
finishes the reply with ``finish_reason: "content_filter"``.

Example::

    fleetgate safety eval --base-url http://127.0.0.1:8080 --api-key sk-... --model fast-small
    fleetgate safety eval --attacks mine.jsonl --benign ok.jsonl --json
    fleetgate safety eval --set xstest.csv --label-column type --unsafe-values contrast \\
        --safe-values safe --policy default --compare strict     # in process, no gateway
    fleetgate safety eval --set mixed.jsonl --model chat --compare-model chat-strict

Every rate is printed with its 95% Wilson interval, outcomes by language as a confusion
table (tp/fn on attacks, fp/tn on benign prompts), and two runs (``--compare`` or
``--compare-model``) with an exact McNemar test on the prompts where they disagree. Exit code 0,
1 when some prompts got no answer, 2 for a bad set or argument.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import aiohttp

from fleetgate.errors import ConfigError
from fleetgate_training.safety.compare import compare, compare_by_lang
from fleetgate_training.safety.evaluate import (
    SAFE_LABELS,
    UNSAFE_LABELS,
    EvalPrompt,
    EvalReport,
    IsBlocked,
    blocked_by,
    evaluate,
    load_labeled,
    load_prompts,
    shipped_set,
)
from fleetgate_training.safety.scan import add_parser as add_scan_parser

__all__ = ["is_blocked_response", "register", "run"]


def register(sub: Any) -> None:
    """Add the ``safety`` command (with its ``eval`` sub-command) to ``sub``."""
    parser = sub.add_parser("safety", help="safety tools")
    inner = parser.add_subparsers(dest="safety_command", required=True)
    ev = inner.add_parser("eval", help="block rate on attacks, false positives on benign prompts")
    sets = ev.add_argument_group("the prompts (default: the shipped sets)")
    sets.add_argument("--attacks", help="JSONL of {prompt, category, lang}, all unsafe")
    sets.add_argument("--benign", help="JSONL of {prompt, category, lang}, all safe")
    sets.add_argument("--set", dest="labeled", help="any JSONL or CSV set with a label column")
    sets.add_argument("--text-column", default="prompt", help="column of the prompt (--set)")
    sets.add_argument("--label-column", default="label", help="column of the label (--set)")
    sets.add_argument("--category-column", default="category", help="(--set; optional)")
    sets.add_argument("--lang-column", default="lang", help="(--set; else guessed)")
    sets.add_argument("--unsafe-values", default=",".join(UNSAFE_LABELS),
                      help="comma-separated labels meaning unsafe (--set)")  # fmt: skip
    sets.add_argument("--safe-values", default=",".join(SAFE_LABELS),
                      help="comma-separated labels meaning safe (--set)")  # fmt: skip
    gw = ev.add_argument_group("through a gateway")
    gw.add_argument("--base-url", default="http://127.0.0.1:8080", help="gateway base URL")
    gw.add_argument("--api-key", default="", help="gateway API key")
    gw.add_argument("--model", help="model alias to send the prompts to")
    gw.add_argument("--compare-model", help="a second alias (another policy) to compare with")
    gw.add_argument("--concurrency", type=int, default=8)
    gw.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    local = ev.add_argument_group("in this process, no gateway")
    local.add_argument("--policy", help="a policy of the config's safety section")
    local.add_argument("--compare", help="a second policy to compare with")
    local.add_argument("--config", help="gateway config file (default: the built-in policies)")
    ev.add_argument("--json", action="store_true", help="print the report as JSON")
    ev.set_defaults(func=run)
    add_scan_parser(inner)


def is_blocked_response(status: int, body: Any) -> bool:
    """True for a 400 ``content_filter`` error or a ``content_filter`` finish reason."""
    if not isinstance(body, dict):
        return False
    if status == 400:
        err = body.get("error")
        return isinstance(err, dict) and err.get("code") == "content_filter"
    choices = body.get("choices") or []
    return any(isinstance(c, dict) and c.get("finish_reason") == "content_filter" for c in choices)


def _prompts(args: argparse.Namespace) -> tuple[list[EvalPrompt], list[EvalPrompt]]:
    if args.labeled:
        if args.attacks or args.benign:
            raise ConfigError("--set replaces --attacks and --benign; give one or the other")

        def values(text: str) -> list[str]:
            return [v for v in (x.strip() for x in text.split(",")) if v]

        return load_labeled(
            args.labeled, text=args.text_column, label=args.label_column,
            category=args.category_column or None, lang=args.lang_column or None,
            unsafe=values(args.unsafe_values), safe=values(args.safe_values),
        )  # fmt: skip
    attacks = load_prompts(args.attacks) if args.attacks else shipped_set("redteam")
    benign = load_prompts(args.benign) if args.benign else shipped_set("benign")
    return attacks, benign


def _through_gateway(session: aiohttp.ClientSession, url: str, model: str) -> IsBlocked:
    async def is_blocked(prompt: str) -> bool:
        payload = {"model": model, "max_tokens": 64,
                   "messages": [{"role": "user", "content": prompt}]}  # fmt: skip
        async with session.post(url, json=payload) as resp:
            body = await resp.json(content_type=None)
            if is_blocked_response(resp.status, body):
                return True
            if resp.status >= 400:
                raise RuntimeError(f"gateway answered {resp.status}")
            return False

    return is_blocked


async def _reports(
    args: argparse.Namespace, attacks: list[EvalPrompt], benign: list[EvalPrompt]
) -> list[tuple[str, EvalReport]]:
    if args.policy:
        from fleetgate.config.loader import load_config
        from fleetgate.resources.outbound import OutboundHttp
        from fleetgate.safety.config import SAFETY_SECTION, SafetyConfig
        from fleetgate.safety.policy import Guardrails
        from fleetgate.safety.registry import builtin_registry

        loaded = load_config(args.config) if args.config else None
        config = (SAFETY_SECTION.of(loaded) if loaded else None) or SafetyConfig()
        names = [args.policy] + ([args.compare] if args.compare else [])
        unknown = [n for n in names if n not in config.policies]
        if unknown:
            known = ", ".join(sorted(config.policies))
            raise ConfigError(f"no policy {', '.join(unknown)} (known: {known})")
        http = OutboundHttp()  # the guard models' session: this command is its own process
        guardrails = Guardrails(config, registry=builtin_registry(http=http))
        try:
            await guardrails.warm_up()
            return [
                (n, await evaluate(attacks, benign, blocked_by(guardrails.policy(n)),
                                   concurrency=args.concurrency))
                for n in names
            ]  # fmt: skip
        finally:
            await guardrails.aclose()
            await http.aclose()
    if not args.model:
        raise ConfigError("give --model (through a gateway) or --policy (in this process)")
    url = args.base_url.rstrip("/") + "/v1/chat/completions"
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    models = [args.model] + ([args.compare_model] if args.compare_model else [])
    async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
        return [
            (m, await evaluate(attacks, benign, _through_gateway(session, url, m),
                               concurrency=args.concurrency))
            for m in models
        ]  # fmt: skip


async def _main(args: argparse.Namespace) -> int:
    try:
        attacks, benign = _prompts(args)
        reports = await _reports(args, attacks, benign)
    except ConfigError as exc:
        print(f"fleetgate safety eval: {exc}", file=sys.stderr)
        return 2
    comparison, by_lang = None, {}
    if len(reports) == 2:
        names = (reports[0][0], reports[1][0])
        comparison = compare(reports[0][1], reports[1][1], names)
        by_lang = compare_by_lang(reports[0][1], reports[1][1], attacks, benign, names)
    if args.json:
        out: dict[str, Any] = {name: r.to_dict() for name, r in reports}
        if comparison is not None:
            out["comparison"] = comparison.to_dict()
            out["comparison_by_lang"] = {lang: c.to_dict() for lang, c in by_lang.items()}
        print(json.dumps(out if len(reports) > 1 else reports[0][1].to_dict(), indent=2))
    else:
        for name, report in reports:
            if len(reports) > 1:
                print(f"== {name}")
            print(report.format())
            print()
        if comparison is not None:
            print(comparison.format())
        if len(by_lang) > 1:
            for lang, c in by_lang.items():
                print(f"{lang}: {c.line()}")
    errors = sum(r.attack.errors + r.benign.errors for _, r in reports)
    return 0 if errors == 0 else 1


def run(args: argparse.Namespace) -> int:
    """Entry point for ``fleetgate safety ...``; returns the exit code."""
    return asyncio.run(_main(args))
