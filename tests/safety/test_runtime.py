"""`SafetyRuntime`: policy swaps keep unchanged checks, survive config reloads, and reach the
other processes that share the database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetgate.app import MIGRATIONS
from fleetgate.errors import ConfigError, ServiceUnavailable
from fleetgate.resources import Resources
from fleetgate.safety import CheckPoint, SafetyConfig
from fleetgate.safety.runtime import OVERRIDES_FILE, SafetyRuntime
from fleetgate.store import Database
from fleetgate.telemetry.registry import Registry
from tests.resources.support import resources

__all__ = ["resources"]

BASE: dict[str, Any] = {
    "checks": {"words": {"type": "words"}, "pii": {"type": "pii"}},
    "policies": {"default": {"input": ["words"]}},
    "audit": {"enabled": False},
}


def _runtime(tmp_path: Path, resources: Resources, config: dict[str, Any] = BASE) -> SafetyRuntime:
    return SafetyRuntime(
        SafetyConfig.model_validate(config), Registry(), data_dir=tmp_path, resources=resources
    )


async def test_policy_change_swaps_guardrails_and_reuses_unchanged_checks(
    tmp_path: Path, resources: Resources
) -> None:
    rt = _runtime(tmp_path, resources)
    words = rt.guardrails.checks["words"]
    await rt.put_policy("strict", {"input": ["words", "pii"], "actions": {"pii": "block"}})
    await rt.map_alias("tiny", "strict")
    assert rt.stage.guardrails is rt.guardrails
    assert rt.guardrails.checks["words"] is words
    policy = rt.stage.policy_for("tiny", None)
    assert policy.name == "strict"
    assert (await policy.run(CheckPoint.INPUT, "mail me at a.b@example.com")).blocked
    with pytest.raises(ConfigError):
        await rt.map_team("finance", "no-such-policy")
    assert rt.stage.policy_for("tiny", None).name == "strict"  # unchanged after a refusal
    await rt.aclose()


async def test_config_reload_keeps_admin_overrides(tmp_path: Path, resources: Resources) -> None:
    rt = _runtime(tmp_path, resources)
    await rt.put_policy("strict", {"input": ["pii"], "actions": {"pii": "block"}})
    await rt.map_alias("tiny", "strict")
    reloaded = {**BASE, "policies": {"default": {"input": []}}}
    rt.set_base(SafetyConfig.model_validate(reloaded))
    assert rt.config.policies["default"].input == []
    assert rt.stage.policy_for("tiny", None).name == "strict"
    await rt.aclose()


def _shared_runtime(tmp_path: Path) -> SafetyRuntime:
    """A runtime as another process would have it: its own resources, the same database."""
    resources = Resources(migrations=MIGRATIONS)
    db = resources.databases.get(None, tmp_path)
    return SafetyRuntime(
        SafetyConfig.model_validate(BASE), Registry(), data_dir=tmp_path,
        resources=resources, database=db,
    )  # fmt: skip


async def test_other_process_sees_overrides_through_the_database(tmp_path: Path) -> None:
    writer, reader = _shared_runtime(tmp_path), _shared_runtime(tmp_path)
    await writer.start()
    await reader.start()
    await writer.put_policy("strict", {"input": ["pii"], "actions": {"pii": "block"}})
    await writer.map_team("finance", "strict")
    await reader.resources.shared.refresh()  # what its poller does every quarter second
    assert reader.stage.policy_for("tiny", "finance").name == "strict"
    third = _shared_runtime(tmp_path)  # a process started later reads them at start
    await third.start()
    assert third.config.teams == {"finance": "strict"}
    await writer.map_team("finance", None)
    await third.resources.shared.refresh()
    assert third.config.teams == {}
    assert not (tmp_path / OVERRIDES_FILE).exists()  # nothing in the data directory
    for rt in (writer, reader, third):
        await rt.aclose()
        await rt.resources.aclose()


async def test_an_overrides_file_of_an_older_version_is_imported_once(tmp_path: Path) -> None:
    (tmp_path / OVERRIDES_FILE).write_text(
        '{"policies": {"strict": {"input": ["pii"]}}, "aliases": {"tiny": "strict"}}'
    )
    rt = _shared_runtime(tmp_path)
    await rt.start()
    assert rt.stage.policy_for("tiny", None).name == "strict"
    assert not (tmp_path / OVERRIDES_FILE).exists()
    assert (tmp_path / f"{OVERRIDES_FILE}.imported").exists()
    await rt.aclose()
    await rt.resources.aclose()
    again = _shared_runtime(tmp_path)  # a restart reads them from the database
    await again.start()
    assert again.stage.policy_for("tiny", None).name == "strict"
    await again.aclose()
    await again.resources.aclose()


async def test_a_change_the_database_cannot_store_is_refused_and_not_in_force(
    tmp_path: Path,
) -> None:
    resources = Resources(migrations=MIGRATIONS)
    down = Database(
        "postgresql+asyncpg://postgres@127.0.0.1:9/none",
        connect_timeout_s=0.5,
        migrations=MIGRATIONS,
    )
    rt = SafetyRuntime(
        SafetyConfig.model_validate(BASE), Registry(), data_dir=tmp_path,
        resources=resources, database=down,
    )  # fmt: skip
    await rt.start()  # starts without its database; follows it once it answers
    with pytest.raises(ServiceUnavailable):
        await rt.map_alias("tiny", "default")
    assert rt.overrides["aliases"] == {}
    assert rt.stage.policy_for("tiny", None).name == "default"
    await rt.aclose()
    await resources.aclose()
    await down.aclose()


async def test_overlong_names_are_refused(tmp_path: Path, resources: Resources) -> None:
    rt = _runtime(tmp_path, resources)
    with pytest.raises(ConfigError):
        await rt.put_policy("p" * 129, {"input": []})
    await rt.aclose()


async def test_replaced_checks_are_closed_after_a_grace_period_not_kept_forever(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    resources: Resources,
) -> None:
    import fleetgate.safety.runtime as runtime_module

    rt = _runtime(tmp_path, resources)
    closed: list[str] = []
    for i in range(50):  # a policy edited over and over: each edit replaces the words check
        options = {"lists": {"custom": [f"word{i}"]}}
        config = {
            **BASE,
            "checks": {**BASE["checks"], "words": {"type": "words", "options": options}},
        }
        old = rt.guardrails.checks["words"]
        old.close = lambda name=f"w{i}": closed.append(name)  # type: ignore[attr-defined]
        rt.set_base(SafetyConfig.model_validate(config))
    assert rt.retired_checks() == 50  # all within the grace period: requests may use them
    monkeypatch.setattr(runtime_module, "RETIRE_AFTER_S", 0.0)
    rt.set_base(SafetyConfig.model_validate(BASE))
    for task in list(rt._tasks):
        if task.get_name() == "fg-safety-retire":
            await task
    assert rt.retired_checks() == 1
    assert len(closed) == 50
    await rt.aclose()
