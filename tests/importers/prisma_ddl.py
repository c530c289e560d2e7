"""PostgreSQL DDL for models of LiteLLM's ``schema.prisma``, derived from the file itself.

Prisma's own migration engine is not used (it is a separate binary); this translates the
scalar fields of the named models the way Prisma's PostgreSQL connector lays them out:
quoted model and field names (``@map`` honoured), ``String`` -> TEXT, ``Int`` -> INTEGER,
``BigInt`` -> BIGINT, ``Float`` -> DOUBLE PRECISION, ``Boolean``, ``DateTime`` ->
TIMESTAMP(3), ``Json`` -> JSONB, ``T[]`` -> arrays, ``?`` -> nullable, ``@id`` -> primary key,
simple ``@default`` values. Relation fields (another model's name) are skipped.

The schema ships in the ``litellm`` wheel; `schema_text` finds it (or downloads the wheel
with pip, without dependencies).
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

__all__ = ["model_ddl", "schema_text"]

_TYPES = {
    "String": "TEXT",
    "Int": "INTEGER",
    "BigInt": "BIGINT",
    "Float": "DOUBLE PRECISION",
    "Boolean": "BOOLEAN",
    "DateTime": "TIMESTAMP(3)",
    "Json": "JSONB",
}
_FIELD = re.compile(r"^\s*(\w+)\s+(\w+)(\[\])?(\?)?(.*)$")


def schema_text(cache: Path) -> str | None:
    """``litellm/proxy/schema.prisma`` from a litellm wheel: one given by
    ``FLEETGATE_LITELLM_WHEEL``, one already downloaded into ``cache``, or one pip downloads."""
    wheels = (
        [os.environ["FLEETGATE_LITELLM_WHEEL"]] if "FLEETGATE_LITELLM_WHEEL" in os.environ else []
    )
    wheels += sorted(glob.glob(str(cache / "litellm-*.whl")))
    if not wheels:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "litellm", "--no-deps", "-q", "-d",
             str(cache)],
            check=False, timeout=300, capture_output=True,
        )  # fmt: skip
        wheels = sorted(glob.glob(str(cache / "litellm-*.whl")))
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[-1]) as whl:
        return whl.read("litellm/proxy/schema.prisma").decode()


def _default(attrs: str, kind: str, array: bool) -> str:
    m = re.search(r"@default\((.*?)\)(?:\s|$|@)", attrs + " ")
    if m is None:
        return ""
    value = m.group(1).strip()
    if value == "now()":
        return " DEFAULT CURRENT_TIMESTAMP"
    if value in ("uuid()", "cuid()", "autoincrement()", "dbgenerated()"):
        return ""
    if array:
        return " DEFAULT '{}'"
    if value.startswith('"'):
        text = value.strip('"').replace("'", "''")
        return f" DEFAULT '{text}'" + ("::jsonb" if kind == "Json" else "")
    if value in ("true", "false") or re.fullmatch(r"-?[0-9.]+", value):
        return f" DEFAULT {value}"
    return ""


def model_ddl(schema: str, model: str) -> str:
    """``CREATE TABLE`` for one model of ``schema``."""
    m = re.search(rf"^model {re.escape(model)} \{{(.*?)^\}}", schema, re.S | re.M)
    if m is None:
        raise ValueError(f"no model {model} in schema.prisma")
    columns, keys = [], []
    for line in m.group(1).splitlines():
        line = line.split("//", 1)[0]
        f = _FIELD.match(line)
        if f is None or line.strip().startswith("@@"):
            continue
        name, kind, array, optional, attrs = f.groups()
        if kind not in _TYPES:
            continue  # a relation to another model (or an enum we do not need)
        mapped = re.search(r'@map\("([^"]+)"\)', attrs)
        column = mapped.group(1) if mapped else name
        sql = _TYPES[kind] + ("[]" if array else "")
        null = "" if optional else " NOT NULL"
        if array:
            null = " NOT NULL" if "@default" in attrs else ""
        columns.append(f'"{column}" {sql}{null}{_default(attrs, kind, bool(array))}')
        if "@id" in attrs:
            keys.append(f'"{column}"')
    if keys:
        columns.append(f"PRIMARY KEY ({', '.join(keys)})")
    return f'CREATE TABLE "{model}" (\n  ' + ",\n  ".join(columns) + "\n)"
