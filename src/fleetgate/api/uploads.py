"""Multipart uploads read within `fleetgate.multimodal.budgets.InputBudget`.

Every byte is counted as it is read, after aiohttp has undone any ``Content-Encoding`` (gzip,
deflate, br), whichever part it belongs to (fields, the file, parts that are skipped, the
boundaries between them), so a small compressed body that inflates without end is stopped at
``upload_bytes``. Parts are read one at a time: the fields before the file first, so a handler
can authenticate, check the model and reserve its limits before it reads the file.

Example::

    form = UploadForm(request, budget, file_bytes=budget.audio_bytes)
    fields = await form.read_fields()   # up to the file part
    ...                                  # limits, now that fields["model"] is known
    await form.read_rest()               # the file, then any fields after it
    audio = form.file
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar, cast

from aiohttp import BodyPartReader, MultipartReader, StreamReader, web
from aiohttp.http_exceptions import HttpProcessingError

from fleetgate.errors import InvalidRequest, PayloadTooLarge, RequestTimeout
from fleetgate.multimodal.budgets import InputBudget

__all__ = ["UploadForm"]

_CHUNK = 64 * 1024
_T = TypeVar("_T")


class _CountedBody:
    """The request body as `MultipartReader` reads it, counted against ``limit``."""

    def __init__(self, content: StreamReader, limit: int) -> None:
        self._content = content
        self._limit = limit
        self.read_bytes = 0

    def _count(self, data: bytes) -> bytes:
        self.read_bytes += len(data)
        if self.read_bytes > self._limit:
            raise PayloadTooLarge(
                f"the upload is larger than {self._limit} bytes (counted after decompression)",
                code="upload_too_large",
            )
        return data

    async def readline(self, *, max_line_length: int | None = None) -> bytes:
        return self._count(await self._content.readline(max_line_length=max_line_length))

    async def read(self, n: int = -1) -> bytes:
        return self._count(await self._content.read(n))

    def at_eof(self) -> bool:
        return self._content.at_eof()

    def unread_data(self, data: bytes) -> None:
        self.read_bytes -= len(data)
        self._content.unread_data(data)


class UploadForm:
    """One ``multipart/form-data`` upload: text fields and one file part (``file_field``).

    Limits (413 past a size, 400 for a malformed body): the whole body ``budget.upload_bytes``
    (also checked against ``Content-Length`` before reading), ``budget.upload_parts`` parts,
    ``budget.field_bytes`` per field and ``file_bytes`` for the file. Each of
    :meth:`read_fields` and :meth:`read_rest` must finish within ``timeout_s`` (408).
    """

    def __init__(
        self,
        request: web.Request,
        budget: InputBudget,
        *,
        file_bytes: int,
        file_field: str = "file",
        timeout_s: float = 30.0,
    ) -> None:
        if not request.content_type.startswith("multipart/form-data"):
            raise InvalidRequest("expected a multipart/form-data upload", param=file_field)
        length = request.content_length
        if length is not None and length > budget.upload_bytes:
            raise PayloadTooLarge(
                f"the upload of {length} bytes is larger than {budget.upload_bytes} bytes",
                code="upload_too_large",
            )
        self._budget = budget
        self._timeout_s = timeout_s
        self._file_field = file_field
        self._file_bytes = min(file_bytes, budget.upload_bytes)
        self._body = _CountedBody(request.content, budget.upload_bytes)
        try:
            # cast: MultipartReader uses readline/read/at_eof/unread_data, all counted here.
            self._reader = MultipartReader(request.headers, cast(StreamReader, self._body))
        except (ValueError, AssertionError, KeyError) as exc:
            raise InvalidRequest(f"malformed multipart upload: {exc}") from None
        self._pending: BodyPartReader | None = None
        self._parts = 0
        self._done = False
        self.fields: dict[str, str] = {}
        self.file: bytes | None = None
        self.filename: str | None = None  # the file part's filename, as sent

    @property
    def has_file(self) -> bool:
        """Whether a file part was seen (read or not), or may still come."""
        return self.file is not None or self._pending is not None or not self._done

    @property
    def read_bytes(self) -> int:
        """Body bytes read so far (after decompression)."""
        return self._body.read_bytes

    async def _in_time(self, reading: Awaitable[_T]) -> _T:
        try:
            async with asyncio.timeout(self._timeout_s):
                return await reading
        except TimeoutError:
            raise RequestTimeout(
                f"The upload did not arrive within {self._timeout_s:g} s."
            ) from None

    async def read_fields(self) -> dict[str, str]:
        """Read parts up to the file part (leaving its body unread) or the end."""
        return await self._in_time(self._read_fields())

    async def read_rest(self) -> dict[str, str]:
        """Read the file part and every field after it."""
        return await self._in_time(self._read_rest())

    async def _read_fields(self) -> dict[str, str]:
        while self._pending is None and not self._done:
            part = await self._next()
            if part is None:
                self._done = True
            elif part.name == self._file_field:
                if self.file is not None:
                    raise InvalidRequest(
                        f"only one '{self._file_field}' part is allowed", param=self._file_field
                    )
                self._pending = part
            else:
                value = await self._read(part, self._budget.field_bytes)
                if part.name is not None:
                    self.fields[part.name] = value.decode(errors="replace")
        return self.fields

    async def _read_rest(self) -> dict[str, str]:
        while not self._done or self._pending is not None:
            await self._read_fields()
            if self._pending is not None:
                part, self._pending = self._pending, None
                self.filename = part.filename
                self.file = await self._read(part, self._file_bytes)
        return self.fields

    async def _next(self) -> BodyPartReader | None:
        try:
            part = await self._reader.next()
        except (ValueError, HttpProcessingError) as exc:
            raise InvalidRequest(f"malformed multipart upload: {exc}") from None
        if part is None:
            return None
        self._parts += 1
        if self._parts > self._budget.upload_parts:
            raise InvalidRequest(
                f"the upload has more than {self._budget.upload_parts} parts",
                code="too_many_parts",
            )
        if not isinstance(part, BodyPartReader):
            raise InvalidRequest("nested multipart bodies are not supported")
        return part

    async def _read(self, part: BodyPartReader, limit: int) -> bytes:
        chunks: list[bytes] = []
        size = 0
        try:
            while chunk := await part.read_chunk(_CHUNK):
                size += len(chunk)
                if size > limit:
                    name = part.name or "part"
                    raise PayloadTooLarge(f"'{name}' is larger than {limit} bytes", param=part.name)
                chunks.append(chunk)
        except (ValueError, HttpProcessingError) as exc:
            raise InvalidRequest(f"malformed multipart upload: {exc}") from None
        return b"".join(chunks)
