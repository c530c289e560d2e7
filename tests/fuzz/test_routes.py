"""Every route of a gateway with every feature on, fuzzed: malformed JSON, NUL characters and
lone surrogates in bodies, queries, path ids, multipart fields and headers, huge and deeply
nested values, wrong types, with the master key and with team keys, on SQLite and PostgreSQL.

The routes come from the running app's router, so a new route is fuzzed without a change here.
No answer may be a 5xx, and no request may stall the event loop for more than 100 ms (a
concurrent ticker measures it). ``pytest -s`` prints the size and time of the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import FormData, web
from aiohttp.test_utils import TestClient, TestServer

from fleetgate.api.errors import error_middleware
from fleetgate.api.state import GATEWAY
from fleetgate.console.sessions import COOKIE
from fleetgate.multimodal.ports import MULTIMODAL
from fleetgate.multimodal.prompt.retrieval import DocumentIndex
from tests.api.fuzz_support import HashEmbedder
from tests.conftest import MASTER, GatewayFactory
from tests.console.support import csrf_of
from tests.fakes import FakeUpstream
from tests.fuzz.cases import Case, Ids, route_cases, routes_of
from tests.fuzz.support import GENERIC, everything_on, run_cases, valid_bodies, version_body

BATCH_LINE = (
    b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": '
    b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}}\n'
)


@dataclass
class Fuzzed:
    client: TestClient[Any, Any]
    ids: Ids
    admin_keys: list[str]  # for /admin and /ui routes, in turn
    user_keys: list[str]  # for the others
    bodies: dict[tuple[str, str], dict[str, Any]]
    session: list[tuple[bytes, bytes]]  # a console session's cookie and CSRF token

    def cases(self) -> tuple[int, list[Case]]:
        routes = routes_of(self.client.app)
        cases: list[Case] = []
        for method, template in routes:
            admin = template.startswith(("/admin", "/ui"))
            keys = self.admin_keys if admin else self.user_keys
            body = self.bodies.get((method, template), GENERIC)
            # signing in or out would end the session the other console routes use
            signed_in = template.startswith("/ui") and template not in NO_SESSION
            session = self.session if signed_in else None
            cases += route_cases(method, template, self.ids, keys, body, session)
        return len(routes), cases


NO_SESSION = {"/ui/login", "/ui/logout", "/ui/oidc/start", "/ui/oidc/callback"}


async def _console_session(client: TestClient[Any, Any]) -> list[tuple[bytes, bytes]]:
    """Sign in to the console with the master key: the session cookie and CSRF token."""
    token = csrf_of(await (await client.get("/ui/login")).text())
    form = {"key": MASTER, "csrf": token}
    resp = await client.post("/ui/login", data=form, allow_redirects=False)
    assert resp.status == 302, await resp.text()
    cookie = next(c.value for c in client.session.cookie_jar if c.key == COOKIE)
    csrf = csrf_of(await (await client.get("/ui/teams")).text())
    return [(b"Cookie", f"{COOKIE}={cookie}".encode()), (b"X-CSRF-Token", csrf.encode())]


async def _ok(client: TestClient[Any, Any], method: str, path: str, key: str, **kw: Any) -> Any:
    resp = await client.request(method, path, headers={"Authorization": f"Bearer {key}"}, **kw)
    assert resp.status in (200, 201), f"{method} {path}: {resp.status} {await resp.text()}"
    return await resp.json()


@pytest.fixture
async def fuzzed(
    gateway: GatewayFactory, upstream: FakeUpstream, database_url: str | None
) -> Fuzzed:
    """The gateway, a team with a team admin key and a user key, a key to revoke, a file, a
    batch, a stored response, a team document and a registry model with a version."""
    client = await gateway(everything_on(upstream.url), database_url=database_url)
    runtime = client.app[GATEWAY].core.ports.require(MULTIMODAL)
    assert runtime is not None
    inputs = runtime.inputs  # the sentence model takes longer to load than the whole run
    runtime.index = DocumentIndex(
        HashEmbedder(),
        max_team_bytes=inputs.team_document_bytes,
        max_team_documents=inputs.team_documents,
    )
    team = (await _ok(client, "POST", "/admin/teams", MASTER, json={"name": "fuzz"}))["id"]
    admin = await _ok(
        client, "POST", "/admin/keys", MASTER, json={"team": team, "role": "team_admin"}
    )
    user = await _ok(client, "POST", "/admin/keys", MASTER, json={"team": team})
    spare = await _ok(client, "POST", "/admin/keys", MASTER, json={"team": team})
    form = FormData()
    form.add_field("purpose", "batch")
    form.add_field("file", BATCH_LINE, filename="in.jsonl")
    file = await _ok(client, "POST", "/v1/files", user["key"], data=form)
    batch = {"input_file_id": file["id"], "endpoint": "/v1/chat/completions",
             "completion_window": "24h"}  # fmt: skip
    batch = await _ok(client, "POST", "/v1/batches", user["key"], json=batch)
    response = await _ok(
        client, "POST", "/v1/responses", user["key"], json={"model": "tiny", "input": "hi"}
    )
    doc = {"text": "Vacation: 27 days."}
    await _ok(client, "PUT", f"/admin/teams/{team}/documents/handbook", MASTER, json=doc)
    await _ok(client, "POST", "/admin/registry/models", MASTER, json={"name": "reg"})
    version = version_body("v1", upstream.url)
    await _ok(client, "POST", "/admin/registry/models/reg/versions", MASTER, json=version)
    ids = Ids(
        params={
            "team": team, "key_id": spare["id"], "doc_id": "handbook", "name": "default",
            "target": "tiny", "alias": "tiny", "model": "reg", "version": "v1", "run": "run-1",
            "action": "pause",
        },
        ids={"files": file["id"], "batches": batch["id"], "responses": response["id"]},
    )  # fmt: skip
    bodies = valid_bodies(team, file["id"], upstream.url)
    session = await _console_session(client)
    return Fuzzed(client, ids, [MASTER, admin["key"]], [user["key"], MASTER], bodies, session)


async def test_no_route_answers_5xx_or_stalls_the_loop(fuzzed: Fuzzed) -> None:
    port = fuzzed.client.server.port
    assert port is not None
    n_routes, cases = fuzzed.cases()
    assert n_routes > 100  # every feature's routes are there
    started = time.monotonic()
    run = await run_cases(port, cases)
    elapsed = time.monotonic() - started
    print(f"\nfuzzed {n_routes} routes with {len(cases)} requests in {elapsed:.1f} s: "
          f"{sorted(run.statuses.items())}, {run.unconfirmed} unconfirmed stalls")  # fmt: skip
    assert not run.errors and not run.stalls, run.report()


async def test_the_fuzz_finds_a_5xx_and_a_stall_on_a_route_it_was_not_told_of() -> None:
    """The harness can fail: a plug-in's route that answers 500 to a NUL in its id and one
    that blocks the loop are both found, from the router alone."""

    async def boom(request: web.Request) -> web.Response:
        raise RuntimeError(request.match_info["thing"])

    async def blocking(request: web.Request) -> web.Response:
        if await request.read() == b'{"a": "b"}':  # the valid body only: one case stalls
            time.sleep(0.15)  # a synchronous call on the loop, as a blocking driver would make
        return web.json_response({})

    # only the error middleware: the route's own 500 must be seen
    app = web.Application(middlewares=[error_middleware])
    app.router.add_routes([web.get("/plugin/{thing}", boom), web.post("/plugin/slow", blocking)])
    ids = Ids(params={"thing": "x"}, ids={})
    cases = [c for m, t in routes_of(app) for c in route_cases(m, t, ids, [MASTER], {"a": "b"})]
    async with TestClient(TestServer(app)) as client:
        assert client.server.port is not None
        run = await run_cases(client.server.port, cases[:40] + cases[-40:])
    assert any("GET /plugin/{thing}" in e and "-> 500" in e for e in run.errors)
    # each stall is counted for a request with the valid body (seen after its answer), never
    # for the one sent next
    kinds = {label.split(": ", 1)[1] for label in run.stalls}
    assert "valid" in kinds, run.stalls
    assert all(k == "valid" or k.startswith("headers") for k in kinds), run.stalls
