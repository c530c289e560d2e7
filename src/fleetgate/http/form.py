"""Reading posted forms (``application/x-www-form-urlencoded`` and ``multipart/form-data``):
the text fields, or a 400 for a form that cannot be read.

aiohttp's ``request.post()`` raises its parser's errors (a part header with a NUL in it) and
``UnicodeDecodeError`` (a field that is not UTF-8) as they are; here both are a 400, and so is a
field holding text no store can hold (`fleetgate.http.text.unstorable`), naming the field.

Example::

    fields = await read_form(request)      # {"name": "team-a", "csrf": "..."}
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from fleetgate.errors import InvalidRequest
from fleetgate.http.text import unstorable

__all__ = ["read_form"]


async def read_form(request: web.Request) -> dict[str, str]:
    """The posted form's text fields (files left out)."""
    try:
        data = await request.post()
    except UnicodeDecodeError:
        raise InvalidRequest("The form is not valid UTF-8.") from None
    except HttpProcessingError as exc:
        raise InvalidRequest(f"The form could not be read: {exc.message}") from None
    fields = {k: v for k, v in data.items() if isinstance(v, str)}
    for name, value in fields.items():
        problem = unstorable(name) or unstorable(value)
        if problem is not None:
            shown = name.replace("\x00", "\\u0000")
            raise InvalidRequest(f"Form field '{shown}' must not contain {problem}.", param=shown)
    return fields
