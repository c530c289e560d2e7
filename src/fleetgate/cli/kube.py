"""``fleetgate kube``: Kubernetes helpers.

``fleetgate kube kueue --config fleetgate.yaml`` prints the Kueue objects (ResourceFlavor,
WorkloadPriorityClasses, Cohorts, ClusterQueues, LocalQueues) rendered from the config's
``scheduling`` teams, orgs and ``scheduling.kueue`` (`fleetgate.scheduling.kueue`).

``fleetgate kube ensure-secret``: create the deployment's Secret with generated values, once.

Run in the cluster by the ``fleetgate-secrets`` Job (deploy/kubernetes/components/generated-secret)
so that no key or password is written in the manifests: it reads the pod's service-account token,
asks the API server for the Secret and, only when it does not exist, creates it with fresh random
values. An existing Secret is never changed (no rotation behind the operator's back); a Secret
another pod created at the same moment (409) counts as done.

    fleetgate kube ensure-secret --name fleetgate \\
        --generate master-key=sk-{random} --generate postgres-password={random} \\
        --set database-url=postgresql://fleetgate:{postgres-password}@fleetgate-postgres:5432/fleetgate

``{random}`` is 32 bytes from the OS's CSPRNG, URL-safe; ``{other-key}`` is that key's value in
the same Secret (generated ones first, then ``--set`` ones in order).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fleetgate.config.loader import load_config
from fleetgate.errors import ConfigError
from fleetgate.scheduling.config import SCHEDULING_SECTION
from fleetgate.scheduling.kueue import render

__all__ = ["ApiServer", "ensure_secret", "register", "render_values", "run", "run_kueue"]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")  # a Secret's key (Kubernetes' rule)
_PLACEHOLDER = re.compile(r"\{([-._a-zA-Z0-9]+)\}")
_ATTEMPTS = 6  # the API server may be briefly unreachable while the cluster settles


@dataclass(frozen=True)
class ApiServer:
    """Where and how to reach the Kubernetes API (in-cluster by default)."""

    url: str
    token: str
    context: ssl.SSLContext | None

    @classmethod
    def in_cluster(cls) -> ApiServer:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise ConfigError(
                "not in a cluster: KUBERNETES_SERVICE_HOST is unset (use --api-server)"
            )
        token = (SERVICE_ACCOUNT / "token").read_text().strip()
        context = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
        return cls(f"https://{host}:{port}", token, context)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> int:
        """The HTTP status of ``method path`` (errors are statuses too, not exceptions)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.context) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)


def _pairs(items: Sequence[str], flag: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _KEY.match(key):
            raise ConfigError(f"{flag} {item!r}: expected KEY=VALUE, KEY of [-._a-zA-Z0-9]")
        out.append((key, value))
    return out


def render_values(generate: Sequence[str], fixed: Sequence[str]) -> dict[str, str]:
    """The Secret's values: ``generate`` ones with ``{random}`` filled, then ``fixed`` ones
    with ``{key}`` filled from the values before them."""
    values: dict[str, str] = {}

    def fill(template: str, flag: str) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name == "random":
                return secrets.token_urlsafe(32)
            if name not in values:
                raise ConfigError(f"{flag}: {{{name}}} names no key before it")
            return values[name]

        return _PLACEHOLDER.sub(one, template)

    for key, template in _pairs(generate, "--generate"):
        values[key] = fill(template, "--generate")
    for key, template in _pairs(fixed, "--set"):
        values[key] = fill(template, "--set")
    if not values:
        raise ConfigError("nothing to put in the Secret: give --generate or --set")
    return values


def ensure_secret(
    api: ApiServer, namespace: str, name: str, values: dict[str, str], *, pause_s: float = 2.0
) -> str:
    """``exists``, ``created`` or ``raced`` (another pod created it first); ConfigError when
    the API refuses (RBAC, a bad name) or stays unreachable."""
    path = f"/api/v1/namespaces/{namespace}/secrets"
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "fleetgate"}},
        "type": "Opaque",
        "stringData": values,
    }
    last = "no answer"
    for attempt in range(_ATTEMPTS):
        try:
            status = api.call("GET", f"{path}/{name}")
            if status == 200:
                return "exists"
            if status == 404:
                status = api.call("POST", path, body)
                if status == 201:
                    return "created"
                if status == 409:
                    return "raced"
            if status in (401, 403, 422):
                raise ConfigError(f"the API server refused ({status}): check the Job's RBAC")
            last = f"HTTP {status}"
        except (OSError, urllib.error.URLError) as exc:
            last = str(exc)
        if attempt + 1 < _ATTEMPTS:
            time.sleep(pause_s * (attempt + 1))
    raise ConfigError(f"could not reach the API server after {_ATTEMPTS} tries: {last}")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("kube", help="Kubernetes helpers")
    actions = parser.add_subparsers(dest="action", required=True)
    ensure = actions.add_parser(
        "ensure-secret",
        help="create a Secret with generated values unless it exists",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ensure.add_argument("--name", required=True)
    ensure.add_argument("--namespace", help="default: the pod's own namespace")
    ensure.add_argument("--generate", action="append", default=[], metavar="KEY=TEMPLATE")
    ensure.add_argument("--set", action="append", default=[], dest="fixed", metavar="KEY=TEMPLATE")
    ensure.add_argument("--api-server", help="default: in-cluster (service-account token)")
    ensure.add_argument("--token-file", type=Path, help="with --api-server")
    ensure.set_defaults(func=run)
    kueue = actions.add_parser(
        "kueue", help="Kueue ClusterQueues, Cohorts and priority classes from the config"
    )
    kueue.add_argument("--config", type=Path, required=True, help="the gateway's config")
    kueue.add_argument("--output", type=Path, help="write the YAML here (default: stdout)")
    kueue.set_defaults(func=run_kueue)


def run_kueue(args: argparse.Namespace) -> int:
    scheduling = SCHEDULING_SECTION.of(load_config(args.config, sections=(SCHEDULING_SECTION,)))
    if scheduling.kueue is None:
        raise ConfigError("no scheduling.kueue section: set at least gpus_per_slot")
    objects = render(scheduling, scheduling.kueue)
    text = "---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects)
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def run(args: argparse.Namespace) -> int:
    values = render_values(args.generate, args.fixed)
    if args.api_server:
        token = args.token_file.read_text().strip() if args.token_file else ""
        api = ApiServer(args.api_server.rstrip("/"), token, None)
    else:
        api = ApiServer.in_cluster()
    namespace = args.namespace or (SERVICE_ACCOUNT / "namespace").read_text().strip()
    outcome = ensure_secret(api, namespace, args.name, values)
    print(f"secret {namespace}/{args.name}: {outcome}", file=sys.stderr)
    return 0
