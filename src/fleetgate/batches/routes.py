"""The OpenAI Files and Batch APIs (the batch lane's routes).

- ``POST /v1/files`` (multipart: ``purpose=batch`` and a JSONL ``file``, at most
  ``batches.max_file_bytes``), ``GET /v1/files``, ``GET /v1/files/{id}``,
  ``GET /v1/files/{id}/content``, ``DELETE /v1/files/{id}``;
- ``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window: 24h``,
  ``metadata``), ``GET /v1/batches`` (``after``, ``limit``), ``GET /v1/batches/{id}``,
  ``POST /v1/batches/{id}/cancel``.

Any key may use them; what it sees is its team's (a key without a team: its own). Another
team's file or batch is 404.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web

from fleetgate.api.uploads import UploadForm
from fleetgate.batches.config import BatchesConfig
from fleetgate.batches.execute import ENDPOINTS
from fleetgate.batches.grant import Grant
from fleetgate.batches.lines import check_lines, read_lines
from fleetgate.batches.store import BatchStore, FileMeta
from fleetgate.batches.tables import TIMED_STATUSES
from fleetgate.contract.principal import Principal
from fleetgate.errors import InvalidRequest
from fleetgate.http import AdminAccess, json_reply
from fleetgate.http.body import read_json
from fleetgate.multimodal.budgets import InputBudget

__all__ = ["BatchRoutes", "batch_object"]

_FIELD_BYTES = 1024
_MAX_METADATA = 16


def batch_object(row: dict[str, Any], completed: int, failed: int) -> dict[str, Any]:
    """OpenAI's batch object from its row and its result counts."""

    def at(column: str) -> int | None:
        value = row.get(column)
        return None if value is None else int(value) // 1000

    return {
        "id": row["id"], "object": "batch", "endpoint": row["endpoint"],
        "errors": row["errors"], "input_file_id": row["input_file_id"],
        "completion_window": row["completion_window"], "status": row["status"],
        "output_file_id": row["output_file_id"], "error_file_id": row["error_file_id"],
        "created_at": at("created_ms"), "expires_at": at("expires_ms"),
        **{f"{status}_at": at(f"{status}_ms") for status in TIMED_STATUSES},
        "request_counts": {"total": row["total"], "completed": completed, "failed": failed},
        "metadata": row["meta"],
    }  # fmt: skip


def _metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if (
        not isinstance(value, dict)
        or len(value) > _MAX_METADATA
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        or any(len(k) > 64 or len(v) > 512 for k, v in value.items())
    ):
        raise InvalidRequest(
            f"'metadata' must map at most {_MAX_METADATA} keys (64 chars) to strings (512 chars).",
            param="metadata",
        )
    return value


def _limit(request: web.Request, default: int = 20) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= 100:
        raise InvalidRequest("'limit' must be an integer from 1 to 100.", param="limit")
    return value


class BatchRoutes:
    def __init__(
        self,
        store: BatchStore,
        access: AdminAccess,
        config: Callable[[], BatchesConfig],
        prepare: Callable[[], Awaitable[None]],
        max_request_bytes: int,
        changed: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.access = access
        self.config = config
        self.prepare = prepare  # the store migrated
        self.max_request_bytes = max_request_bytes
        self.changed = changed  # a batch was created or cancelled: this replica's worker looks now

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return [
            web.post("/v1/files", self.upload),
            web.get("/v1/files", self.list_files),
            web.get("/v1/files/{id}", self.get_file),
            web.get("/v1/files/{id}/content", self.get_content),
            web.delete("/v1/files/{id}", self.delete_file),
            web.post("/v1/batches", self.create),
            web.get("/v1/batches", self.list_batches),
            web.get("/v1/batches/{id}", self.get_batch),
            web.post("/v1/batches/{id}/cancel", self.cancel),
        ]

    async def _caller(self, request: web.Request) -> tuple[Principal, str]:
        principal = self.access.principal(request)
        await self.prepare()
        return principal, principal.tenant

    # ------------------------------------------------------------------ files

    async def upload(self, request: web.Request) -> web.Response:
        _, owner = await self._caller(request)
        limit = self.config().max_file_bytes
        budget = InputBudget(
            upload_bytes=limit + 64 * 1024, upload_parts=4, field_bytes=_FIELD_BYTES
        )
        form = UploadForm(request, budget, file_bytes=limit)
        purpose = (await form.read_fields()).get("purpose")
        if purpose is not None and purpose != "batch":  # known before the file: refuse early
            raise InvalidRequest("'purpose' must be 'batch'.", param="purpose")
        purpose = (await form.read_rest()).get("purpose")
        if purpose != "batch":
            raise InvalidRequest("'purpose' must be 'batch'.", param="purpose")
        if form.file is None:
            raise InvalidRequest("The upload has no 'file' part.", param="file")
        try:
            form.file.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest("The file must be UTF-8 JSONL.", param="file") from None
        if not form.file.strip():
            raise InvalidRequest("The file is empty.", param="file")
        filename = form.filename or "input.jsonl"
        if any(ch < " " or "\x7f" <= ch <= "\x9f" for ch in filename):  # a NUL: no store keeps it
            raise InvalidRequest("The file's name must not hold control characters.", param="file")
        meta = await self.store.add_file(owner, purpose, filename, form.file)
        return json_reply(meta.to_wire())

    async def list_files(self, request: web.Request) -> web.Response:
        _, owner = await self._caller(request)
        found: list[FileMeta] = await self.store.files(owner, _limit(request, 100))
        data = [meta.to_wire() for meta in found]
        return json_reply({"object": "list", "data": data, "has_more": False})

    async def get_file(self, request: web.Request) -> web.Response:
        _, owner = await self._caller(request)
        meta = await self.store.file(request.match_info["id"], owner)
        return json_reply(meta.to_wire())

    async def get_content(self, request: web.Request) -> web.Response:
        _, owner = await self._caller(request)
        content = await self.store.content(request.match_info["id"], owner)
        return web.Response(body=content, content_type="application/jsonl")

    async def delete_file(self, request: web.Request) -> web.Response:
        _, owner = await self._caller(request)
        file_id = request.match_info["id"]
        await self.store.delete_file(file_id, owner)
        return json_reply({"id": file_id, "object": "file", "deleted": True})

    # ------------------------------------------------------------------ batches

    async def create(self, request: web.Request) -> web.Response:
        principal, owner = await self._caller(request)
        body = await read_json(request, self.max_request_bytes)
        cfg = self.config()
        file_id = body.get("input_file_id")
        if not isinstance(file_id, str) or not file_id:
            raise InvalidRequest("'input_file_id' is required.", param="input_file_id")
        endpoint = body.get("endpoint")
        if endpoint not in ENDPOINTS:
            raise InvalidRequest(
                f"'endpoint' must be one of {', '.join(sorted(ENDPOINTS))}.", param="endpoint"
            )
        if body.get("completion_window") != "24h":
            raise InvalidRequest("'completion_window' must be '24h'.", param="completion_window")
        meta = _metadata(body.get("metadata"))
        source = await self.store.file(file_id, owner)
        if source.purpose != "batch":
            raise InvalidRequest(
                f"The file '{file_id}' has purpose '{source.purpose}', not 'batch'.",
                param="input_file_id",
            )
        content = await self.store.content(file_id, owner)
        lines = await asyncio.to_thread(
            read_lines, content, str(endpoint), self.max_request_bytes
        )  # parsing up to max_file_bytes is CPU work: off the event loop
        check_lines(lines, cfg.max_lines)
        row = await self.store.create(
            owner=owner, key_id=principal.key_id, endpoint=str(endpoint), input_file_id=file_id,
            total=len(lines), meta=meta, max_active=cfg.max_in_progress_per_team,
            principal=Grant.of(principal).to_json(),
        )  # fmt: skip
        self.changed()
        return json_reply(batch_object(row, 0, 0))

    async def _batch(self, batch_id: str, owner: str) -> web.Response:
        row = await self.store.batch(batch_id, owner)
        counts = await self.store.counts(batch_id)
        return json_reply(batch_object(row, counts.completed, counts.failed))

    async def get_batch(self, request: web.Request) -> web.Response:
        _, owner = await self._caller(request)
        return await self._batch(request.match_info["id"], owner)

    async def cancel(self, request: web.Request) -> web.Response:
        _, owner = await self._caller(request)
        batch_id = request.match_info["id"]
        await self.store.cancel(batch_id, owner)
        self.changed()
        return await self._batch(batch_id, owner)

    async def list_batches(self, request: web.Request) -> web.Response:
        _, owner = await self._caller(request)
        limit = _limit(request)
        rows = await self.store.batches(owner, request.query.get("after"), limit + 1)
        page = rows[:limit]
        data = []
        for row in page:
            counts = await self.store.counts(row["id"])
            data.append(batch_object(row, counts.completed, counts.failed))
        return json_reply(
            {
                "object": "list", "data": data, "has_more": len(rows) > limit,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
        )  # fmt: skip
