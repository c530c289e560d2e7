"""``fleetgate kube ensure-secret`` against an HTTP server that answers as the Kubernetes API
does for Secrets (GET 200/404, POST 201/409, 403 without the RBAC)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fleetgate.cli.kube import ApiServer, ensure_secret, render_values
from fleetgate.cli.main import main
from fleetgate.errors import ConfigError

TOKEN = "sa-token-1"


@dataclass
class FakeApi:
    secrets: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    allow_create: bool = True
    race: bool = False  # POST answers 409 as if another pod created it first
    url: str = ""


@pytest.fixture
def api() -> Iterator[FakeApi]:
    state = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorised(self) -> bool:
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._answer(401, {"kind": "Status", "code": 401})
                return False
            return True

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            state.calls.append(("GET", self.path))
            if not self._authorised():
                return
            parts = self.path.split("/")  # /api/v1/namespaces/NS/secrets/NAME
            ns, name = parts[4], parts[6]
            secret = state.secrets.get((ns, name))
            self._answer(200 if secret else 404, secret or {"kind": "Status", "code": 404})

        def do_POST(self) -> None:  # noqa: N802
            state.calls.append(("POST", self.path))
            if not self._authorised():
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not state.allow_create:
                self._answer(403, {"kind": "Status", "code": 403})
                return
            ns = self.path.split("/")[4]
            key = (ns, body["metadata"]["name"])
            if state.race or key in state.secrets:
                self._answer(409, {"kind": "Status", "code": 409})
                return
            state.secrets[key] = body
            self._answer(201, body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


ARGS = [
    "--generate", "master-key=sk-{random}",
    "--generate", "postgres-password={random}",
    "--set", "database-url=postgresql://fleetgate:{postgres-password}@fleetgate-postgres:5432/fg",
    "--set", "redis-url=redis://fleetgate-redis:6379/0",
]  # fmt: skip


def _run(api: FakeApi, tmp_path: Path) -> int:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    return main(["kube", "ensure-secret", "--name", "fleetgate", "--namespace", "trial",
                 "--api-server", api.url, "--token-file", str(token), *ARGS])  # fmt: skip


def test_creates_the_secret_once_with_fresh_values(api: FakeApi, tmp_path: Path) -> None:
    assert _run(api, tmp_path) == 0
    secret = api.secrets[("trial", "fleetgate")]
    assert secret["kind"] == "Secret" and secret["type"] == "Opaque"
    values = secret["stringData"]
    assert values["master-key"].startswith("sk-") and len(values["master-key"]) >= 40
    password = values["postgres-password"]
    assert len(password) >= 40 and password not in values["master-key"]
    assert values["database-url"] == f"postgresql://fleetgate:{password}@fleetgate-postgres:5432/fg"
    assert values["redis-url"] == "redis://fleetgate-redis:6379/0"
    # A second run (the Job retried, a second namespace apply) changes nothing.
    assert _run(api, tmp_path) == 0
    assert api.secrets[("trial", "fleetgate")]["stringData"] == values
    assert [m for m, _ in api.calls] == ["GET", "POST", "GET"]


def test_two_runs_never_share_a_value() -> None:
    first = render_values(["k={random}"], [])
    second = render_values(["k={random}"], [])
    assert first["k"] != second["k"]


def test_a_race_counts_as_done_and_a_refusal_is_an_error(api: FakeApi) -> None:
    server = ApiServer(api.url, TOKEN, None)
    api.race = True
    assert ensure_secret(server, "ns", "s", {"a": "b"}, pause_s=0) == "raced"
    api.race, api.allow_create = False, False
    with pytest.raises(ConfigError, match="RBAC"):
        ensure_secret(server, "ns", "s", {"a": "b"}, pause_s=0)
    with pytest.raises(ConfigError, match="refused"):
        ensure_secret(ApiServer(api.url, "wrong", None), "ns", "s", {"a": "b"}, pause_s=0)


def test_an_unreachable_api_server_is_retried_then_an_error() -> None:
    server = ApiServer("http://127.0.0.1:9", TOKEN, None)
    with pytest.raises(ConfigError, match="could not reach"):
        ensure_secret(server, "ns", "s", {"a": "b"}, pause_s=0)


@pytest.mark.parametrize(
    ("generate", "fixed", "message"),
    [
        (["no-equals"], [], "KEY=VALUE"),
        (["bad key={random}"], [], "KEY=VALUE"),
        ([], ["url={later}"], "names no key"),
        ([], [], "nothing to put"),
    ],
)
def test_bad_arguments_are_refused(generate: list[str], fixed: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        render_values(generate, fixed)
