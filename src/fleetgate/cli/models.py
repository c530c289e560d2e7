"""``fleetgate models register|list|show|promote|rollback|history``: the model registry
through the admin API (master key).

Example::

    fleetgate models register chat --artifact-uri s3://models/chat/7 \\
        --api-base http://10.0.0.7:8000/v1 --served-model llama-3.1-8b --tensor-parallel 2
    fleetgate models promote chat v7 --stage production
    fleetgate models rollback chat
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fleetgate.cli.admin_client import call, client_command, render
from fleetgate.errors import ConfigError

__all__ = ["register", "run"]

_BASE = "/admin/registry/models"
_VERSION_COLUMNS = ("version", "status", "artifact_uri", "quantization", "tensor_parallel",
                    "max_model_len", "parent_version")  # fmt: skip
_HISTORY_COLUMNS = ("id", "action", "stage", "from_version", "to_version", "actor", "created_ms")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("models", help="the model registry")
    actions = parser.add_subparsers(dest="action", required=True)
    reg = client_command(actions, "register", help="register an immutable version of a model")
    reg.add_argument("model")
    reg.add_argument("--version", help="its name (default v<n>)")
    reg.add_argument("--artifact-uri", required=True)
    reg.add_argument("--tokenizer")
    reg.add_argument("--tensor-parallel", type=int)
    reg.add_argument("--max-model-len", type=int)
    reg.add_argument("--quantization")
    reg.add_argument("--parent", help="the version it derives from (quantized, fine-tuned)")
    reg.add_argument("--card", type=Path, help="a model card file (text or JSON)")
    reg.add_argument("--deployment", action="append", default=[],
                     help="a deployment as JSON, like the config's deployments[] entries "
                          "(repeatable)")  # fmt: skip
    reg.add_argument("--api-base", help="shortcut for one openai deployment at this URL")
    reg.add_argument("--served-model", help="the engine's model name for --api-base")
    reg.add_argument("--description", help="the model's description, if it is new")
    client_command(actions, "list", help="models and their stages")
    show = client_command(actions, "show", help="a model's versions, or one version")
    show.add_argument("model")
    show.add_argument("version", nargs="?")
    promote = client_command(actions, "promote", help="move a stage to a version")
    promote.add_argument("model")
    promote.add_argument("version")
    promote.add_argument("--stage", default="production")
    promote.add_argument("--expected", help="refuse (409) unless the stage holds this version")
    promote.add_argument("--expect-empty", action="store_true",
                         help="refuse (409) unless the stage is empty")  # fmt: skip
    promote.add_argument("--force", action="store_true",
                         help="promote to production without a passing gate (audited)")  # fmt: skip
    rollback = client_command(actions, "rollback", help="production back to the previous version")
    rollback.add_argument("model")
    rollback.add_argument("--expected", help="refuse (409) unless production holds this")
    history = client_command(actions, "history", help="stage moves, newest first")
    history.add_argument("model")
    history.add_argument("--limit", type=int, default=100)
    parser.set_defaults(func=run)


def _deployments(args: argparse.Namespace) -> list[Any]:
    out: list[Any] = []
    for raw in args.deployment:
        try:
            out.append(json.loads(raw))
        except ValueError as exc:
            raise ConfigError(f"--deployment is not JSON: {exc}") from None
    if args.api_base:
        if not args.served_model:
            raise ConfigError("--api-base needs --served-model")
        out.append({"provider": "openai", "api_base": args.api_base, "model": args.served_model})
    if not out:
        raise ConfigError("a version needs --deployment JSON or --api-base/--served-model")
    return out


def _card(path: Path | None) -> Any:
    if path is None:
        return {}
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def _register(args: argparse.Namespace) -> list[dict[str, Any]]:
    known = {m["name"] for m in call(args, "GET", _BASE)["data"]}
    if args.model not in known:
        call(args, "POST", _BASE, {"name": args.model, "description": args.description})
    body = {
        "version": args.version, "artifact_uri": args.artifact_uri, "tokenizer": args.tokenizer,
        "tensor_parallel": args.tensor_parallel, "max_model_len": args.max_model_len,
        "quantization": args.quantization, "parent_version": args.parent,
        "card": _card(args.card), "deployments": _deployments(args),
    }  # fmt: skip
    return [call(args, "POST", f"{_BASE}/{args.model}/versions", body)]


def run(args: argparse.Namespace) -> int:
    columns: tuple[str, ...] | None = None
    if args.action == "register":
        rows, columns = _register(args), _VERSION_COLUMNS
    elif args.action == "list":
        rows = [{"name": m["name"], **m["stages"]} for m in call(args, "GET", _BASE)["data"]]
    elif args.action == "show" and args.version:
        rows = [call(args, "GET", f"{_BASE}/{args.model}/versions/{args.version}")]
    elif args.action == "show":
        rows, columns = call(args, "GET", f"{_BASE}/{args.model}")["versions"], _VERSION_COLUMNS
    elif args.action == "promote":
        body: dict[str, Any] = {"stage": args.stage, "version": args.version}
        if args.expect_empty or args.expected:
            body["expected"] = None if args.expect_empty else args.expected
        if args.force:
            body["force"] = True
        reply = call(args, "POST", f"{_BASE}/{args.model}/promote", body)
        rows, columns = reply["moves"], ("stage", "from_version", "to_version")
    elif args.action == "rollback":
        body = {} if args.expected is None else {"expected": args.expected}
        reply = call(args, "POST", f"{_BASE}/{args.model}/rollback", body)
        rows, columns = reply["moves"], ("stage", "from_version", "to_version")
    else:
        path = f"{_BASE}/{args.model}/history?limit={args.limit}"
        rows, columns = call(args, "GET", path)["data"], _HISTORY_COLUMNS
    print(render(rows, args.output, None if args.output == "json" else columns))
    return 0
