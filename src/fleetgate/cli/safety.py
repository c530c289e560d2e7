"""``fleetgate safety eval``: run red-team and benign prompt sets through a gateway.

A prompt counts as blocked when the gateway answers 400 with error code ``content_filter`` or
finishes the reply with ``finish_reason: "content_filter"``.

Example::

    fleetgate safety eval --base-url http://127.0.0.1:8080 --api-key sk-... --model fast-small
    fleetgate safety eval --attacks mine.jsonl --benign ok.jsonl --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import aiohttp

from fleetgate.safety.evaluate import EvalPrompt, evaluate, load_prompts, shipped_set

__all__ = ["is_blocked_response", "register", "run"]


def register(sub: Any) -> None:
    """Add the ``safety`` command (with its ``eval`` sub-command) to ``sub``."""
    parser = sub.add_parser("safety", help="safety tools")
    inner = parser.add_subparsers(dest="safety_command", required=True)
    ev = inner.add_parser("eval", help="block rate on attacks, false positives on benign prompts")
    ev.add_argument("--attacks", help="JSONL of {prompt, category, lang} (default: shipped set)")
    ev.add_argument("--benign", help="JSONL of {prompt, category, lang} (default: shipped set)")
    ev.add_argument("--base-url", default="http://127.0.0.1:8080", help="gateway base URL")
    ev.add_argument("--api-key", default="", help="gateway API key")
    ev.add_argument("--model", required=True, help="model alias to send the prompts to")
    ev.add_argument("--concurrency", type=int, default=8)
    ev.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    ev.add_argument("--json", action="store_true", help="print the report as JSON")
    ev.set_defaults(func=run)


def is_blocked_response(status: int, body: Any) -> bool:
    """True for a 400 ``content_filter`` error or a ``content_filter`` finish reason."""
    if not isinstance(body, dict):
        return False
    if status == 400:
        err = body.get("error")
        return isinstance(err, dict) and err.get("code") == "content_filter"
    choices = body.get("choices") or []
    return any(isinstance(c, dict) and c.get("finish_reason") == "content_filter" for c in choices)


async def _main(args: argparse.Namespace) -> int:
    attacks: list[EvalPrompt] = (
        load_prompts(args.attacks) if args.attacks else shipped_set("redteam")
    )
    benign: list[EvalPrompt] = load_prompts(args.benign) if args.benign else shipped_set("benign")
    url = args.base_url.rstrip("/") + "/v1/chat/completions"
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:

        async def is_blocked(prompt: str) -> bool:
            payload = {"model": args.model, "max_tokens": 64,
                       "messages": [{"role": "user", "content": prompt}]}  # fmt: skip
            async with session.post(url, json=payload) as resp:
                body = await resp.json(content_type=None)
                if is_blocked_response(resp.status, body):
                    return True
                if resp.status >= 400:
                    raise RuntimeError(f"gateway answered {resp.status}")
                return False

        report = await evaluate(attacks, benign, is_blocked, concurrency=args.concurrency)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
    return 0 if report.attack.errors == 0 and report.benign.errors == 0 else 1


def run(args: argparse.Namespace) -> int:
    """Entry point for ``fleetgate safety ...``; returns the exit code."""
    return asyncio.run(_main(args))
