"""Tables and migrations per feature: the store migrates the revision folders the feature
classes name (`fleetgate.app.MIGRATIONS`) together with its own, to every branch's head.

- a database made by the old single-folder chain (0001..0012 in ``store/migrations/versions``)
  upgrades to every head keeping its schema and rows, and then equals a fresh one;
- a feature defined here, with its own table and a revision branch in a folder of its own, is
  migrated by the runner with no file outside that folder touched;
- the store defines no feature's table (one added back there fails here).
"""

from __future__ import annotations

import ast
import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Table, insert, inspect, select, text

import fleetgate
from fleetgate.app import FEATURES, MIGRATIONS
from fleetgate.batches.tables import batches, files
from fleetgate.feature import BaseFeature, migration_folders
from fleetgate.multimodal.tables import conversations, documents
from fleetgate.releases.tables import registry_models
from fleetgate.store import Database
from fleetgate.store.migrate import GROUND_FLOOR, alembic_config, version_locations
from fleetgate.store.tables import metadata, shared_state
from fleetgate.tenancy.tables import api_keys, spend, teams
from tests.tenancy.support import database_for

PACKAGE = Path(fleetgate.__file__).parent
GROUND_TABLES = {"fg_shared_state", "fg_shared_versions"}
# Revisions of the ground floor's folder from before the split, which also create feature
# tables (fg_documents, fg_document_chunks, fg_safety_strikes) next to the shared state.
GRANDFATHERED = {"0005_shared_state.py"}

NOTES_REVISION = '''"""Notes: a test feature's own table, on its own branch.

Revision ID: notes_0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "notes_0001"
down_revision = None
branch_labels = ("notes",)
depends_on = "0001"  # its rows name a team (tenancy's first revision)


def upgrade() -> None:
    op.create_table(
        "fg_test_notes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("team_id", sa.String(40), sa.ForeignKey("fg_teams.id"), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("fg_test_notes")
'''


@pytest.fixture(params=["sqlite", "postgres"])
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    async with database_for(request.param, f"sqlite:///{tmp_path / 'fleetgate.db'}") as url:
        yield url


def _old_chain(tmp_path: Path) -> Config:
    """An Alembic config of the layout before the split: the revisions 0001..0012 in one
    folder (newer ones were written after it)."""
    folder = tmp_path / "old_versions"
    folder.mkdir()
    for location in version_locations(MIGRATIONS):
        for script in location.glob("*.py"):
            if script.name[:4].isdigit() and script.name[:4] <= "0012":
                shutil.copy(script, folder / script.name)
    cfg = Config()
    cfg.set_main_option("script_location", str(GROUND_FLOOR.parent))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("version_locations", str(folder))
    return cfg


def _upgrade(cfg: Config, revision: str) -> Any:
    def run(conn: Connection) -> None:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)

    return run


def _schema(conn: Connection) -> dict[str, Any]:
    """Every table's columns, keys, indexes and constraints, as reflected."""
    insp = inspect(conn)
    out: dict[str, Any] = {}
    for name in sorted(insp.get_table_names()):
        out[name] = {
            "columns": [(c["name"], str(c["type"]), c["nullable"]) for c in insp.get_columns(name)],
            "pk": insp.get_pk_constraint(name)["constrained_columns"],
            "fks": sorted(
                (tuple(f["constrained_columns"]), f["referred_table"])
                for f in insp.get_foreign_keys(name)
            ),
            "indexes": sorted(
                (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                for i in insp.get_indexes(name)
            ),
            "unique": sorted(
                (u["name"], tuple(u["column_names"])) for u in insp.get_unique_constraints(name)
            ),
        }
    return out


def _rows(conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in a stable order."""
    out = {}
    for name in sorted(inspect(conn).get_table_names()):
        rows = conn.execute(text(f"SELECT * FROM {name}")).all()
        out[name] = sorted((tuple(r) for r in rows), key=repr)
    return out


def _seed(conn: Connection) -> None:
    """A few rows in tables of several features and of the ground floor."""
    conn.execute(insert(teams).values(id="team_1", name="one", created_ms=1, tags={}))
    conn.execute(
        insert(api_keys).values(
            id="key_1", key_hash="h" * 64, key_hint="sk-...1", team_id="team_1", role="user",
            tags={}, created_ms=1,
        )
    )  # fmt: skip
    conn.execute(
        insert(spend).values(
            request_id="r1", created_ms=5, key_id="key_1", team_id="team_1", alias="tiny",
            status=200, input_tokens=3, output_tokens=4, cached_tokens=0, cost_nusd=70,
            latency_ms=9, tags={}, cache_write_tokens=None,
        )
    )  # fmt: skip
    conn.execute(
        insert(files).values(
            id="file-1", owner="team_1", purpose="batch", filename="in.jsonl", bytes=2,
            content=b"{}", created_ms=1,
        )
    )  # fmt: skip
    conn.execute(
        insert(batches).values(
            id="batch_1", owner="team_1", key_id="key_1", endpoint="/v1/chat/completions",
            input_file_id="file-1", completion_window="24h", status="validating", total=1,
            created_ms=1, expires_ms=2, lease_until_ms=0, principal={"aliases": ["tiny"]},
        )
    )  # fmt: skip
    conn.execute(insert(documents).values(team="t", doc_id="d", bytes=1, chunks=0, updated_ms=1))
    conn.execute(insert(conversations).values(id="c1", tenant="t", created_at=1.0))
    conn.execute(insert(registry_models).values(name="m", created_ms=1))
    conn.execute(insert(shared_state).values(kind="canary_splits", name="a", body={}, updated_ms=1))


async def test_a_database_of_the_old_chain_upgrades_unchanged(db_url: str, tmp_path: Path) -> None:
    """At 0012, made by the single-folder chain and holding rows: the per-feature folders take
    it to every head, keeping every table, column, index and row it had, and it ends with the
    schema of a fresh database."""
    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        async with db.engine.begin() as conn:
            await conn.run_sync(_upgrade(_old_chain(tmp_path), "0012"))
            await conn.run_sync(_seed)
        async with db.engine.connect() as conn:
            schema, rows = await conn.run_sync(_schema), await conn.run_sync(_rows)
        assert rows["fg_spend"] and rows["fg_batches"] and rows["fg_shared_state"]
        await db.migrate()
        async with db.engine.connect() as conn:
            upgraded = await conn.run_sync(_schema)
            kept = await conn.run_sync(_rows_of, schema)
            heads = (await conn.execute(text("SELECT version_num FROM alembic_version"))).all()
    finally:
        await db.aclose()
    for name, table in schema.items():
        if name == "alembic_version":
            continue
        now = upgraded[name]
        assert set(table["columns"]) <= set(now["columns"]), name
        assert table["pk"] == now["pk"] and set(table["indexes"]) <= set(now["indexes"]), name
        assert set(table["fks"]) <= set(now["fks"]), name
    assert kept == {name: r for name, r in rows.items() if name != "alembic_version"}
    assert sorted(h[0] for h in heads) == _builtin_heads()
    async with database_for(db.dialect.replace("postgresql", "postgres"), None) as fresh_url:
        fresh = Database.from_url(fresh_url, tmp_path / "fresh", migrations=MIGRATIONS)
        try:
            await fresh.migrate()
            async with fresh.engine.connect() as conn:
                assert await conn.run_sync(_schema) == upgraded
        finally:
            await fresh.aclose()


def _builtin_heads() -> list[str]:
    return sorted(ScriptDirectory.from_config(alembic_config(MIGRATIONS)).get_heads())


def _rows_of(conn: Connection, schema: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of the tables of ``schema``, reading only the columns it lists."""
    out = {}
    for name, table in schema.items():
        if name == "alembic_version":
            continue
        columns = ", ".join(c[0] for c in table["columns"])
        rows = conn.execute(text(f"SELECT {columns} FROM {name}")).all()
        out[name] = sorted((tuple(r) for r in rows), key=repr)
    return out


async def test_a_fresh_database_gets_every_table_a_feature_defines(tmp_path: Path) -> None:
    """Every table on the shared metadata (each feature's ``tables.py``) is created by the
    migrations the feature classes name, whether the feature is switched on or not."""
    for path in PACKAGE.rglob("tables.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        __import__(module)
    assert MIGRATIONS == migration_folders(FEATURES)
    db = Database.from_url(None, tmp_path, migrations=MIGRATIONS)
    try:
        await db.migrate()
        async with db.engine.connect() as conn:
            names = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
    finally:
        await db.aclose()
    defined = set(metadata.tables)
    assert len(defined) > 30
    assert defined <= names, sorted(defined - names)


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _notes_feature(folder: Path) -> type[BaseFeature]:
    class Notes(BaseFeature):
        """A test feature: one table, created by a revision branch in its own folder."""

        name = "notes"
        migrations = (folder,)

    return Notes


async def test_a_new_feature_brings_its_own_migration_branch(db_url: str, tmp_path: Path) -> None:
    """The feature's folder is all it adds: a database already at the built-in heads, with
    rows, gets its table; the built-in history is untouched; a second run does nothing."""
    folder = tmp_path / "notes" / "migrations"
    folder.mkdir(parents=True)
    (folder / "0001_notes.py").write_text(NOTES_REVISION)
    before = _tree_digest(PACKAGE)

    db = Database.from_url(db_url, tmp_path, migrations=MIGRATIONS)
    try:
        await db.migrate()
        async with db.engine.begin() as conn:
            await conn.execute(insert(teams).values(id="team_1", name="one", created_ms=1, tags={}))
    finally:
        await db.aclose()

    folders = migration_folders((*FEATURES, _notes_feature(folder)))
    assert folders[-1] == folder and folders[:-1] == MIGRATIONS
    db = Database.from_url(db_url, tmp_path, migrations=folders)
    try:
        await db.migrate()
        await db.migrate()
        async with db.engine.begin() as conn:
            await conn.execute(text("INSERT INTO fg_test_notes VALUES (1, 'team_1', 'hello')"))
            notes = (await conn.execute(text("SELECT team_id, text FROM fg_test_notes"))).all()
            team_names = (await conn.execute(select(teams.c.name))).scalars().all()
            heads = (await conn.execute(text("SELECT version_num FROM alembic_version"))).all()
    finally:
        await db.aclose()
    assert [tuple(n) for n in notes] == [("team_1", "hello")]
    assert team_names == ["one"]
    assert sorted(h[0] for h in heads) == sorted([*_builtin_heads(), "notes_0001"])
    assert _tree_digest(PACKAGE) == before


async def test_a_fresh_database_with_a_branch_that_depends_on_a_feature(tmp_path: Path) -> None:
    """``depends_on`` orders the branch after the revision it needs on an empty database."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "0001_notes.py").write_text(NOTES_REVISION)
    db = Database.from_url(None, tmp_path, migrations=(*MIGRATIONS, folder))
    try:
        await db.migrate()
        async with db.engine.connect() as conn:
            names = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
    finally:
        await db.aclose()
    assert {"fg_teams", "fg_test_notes", "fg_batches"} <= names


async def test_migrating_without_the_features_folders_is_refused(tmp_path: Path) -> None:
    db = Database.from_url(None, tmp_path)
    try:
        with pytest.raises(ValueError, match="no feature migrations"):
            await db.migrate()
    finally:
        await db.aclose()
    with pytest.raises(ValueError, match="does not exist"):
        version_locations([tmp_path / "missing"])


def _table_names(path: Path) -> set[str]:
    """The names of the tables ``Table("name", ...)`` calls in ``path`` define."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        first = node.args[0]
        if called in ("Table", "table") and isinstance(first, ast.Constant):
            names.add(str(first.value))
    return names


def test_the_store_defines_no_feature_table() -> None:
    """The ground floor keeps the shared state only: a feature's table defined in ``store/``,
    or created by a new revision in its folder, belongs in the feature's package."""
    store = PACKAGE / "store"
    defined = {
        name
        for path in store.rglob("*.py")
        if GROUND_FLOOR not in path.parents
        for name in _table_names(path)
    }
    assert defined == GROUND_TABLES
    store_tables = __import__("fleetgate.store.tables", fromlist=["metadata"])
    assert {t.name for t in vars(store_tables).values() if isinstance(t, Table)} == GROUND_TABLES
    for revision in GROUND_FLOOR.glob("*.py"):
        if revision.name in GRANDFATHERED or revision.name == "__init__.py":
            continue
        tree = ast.parse(revision.read_text(encoding="utf-8"))
        named = {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith(("fg_", "mm_"))
        }
        assert named <= GROUND_TABLES, f"{revision.name} touches {sorted(named - GROUND_TABLES)}"


def test_each_feature_revision_folder_is_a_folder_of_its_package() -> None:
    """A built-in feature's revisions live in its own package, not in another one's."""
    for cls in FEATURES:
        package = Path(__import__(cls.__module__, fromlist=["_"]).__file__ or "").parent
        for folder in cls.migrations:
            assert folder.is_dir() and folder.parent == package, (cls.__name__, folder)
