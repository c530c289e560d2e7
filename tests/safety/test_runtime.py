"""`SafetyRuntime`: policy swaps keep unchanged checks, survive config reloads, and reach the
other processes that share the data directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetgate.errors import ConfigError
from fleetgate.safety import CheckPoint, SafetyConfig
from fleetgate.safety.runtime import SafetyRuntime
from fleetgate.telemetry.registry import Registry

BASE: dict[str, Any] = {
    "checks": {"words": {"type": "words"}, "pii": {"type": "pii"}},
    "policies": {"default": {"input": ["words"]}},
    "audit": {"enabled": False},
}


def _runtime(tmp_path: Path, config: dict[str, Any] = BASE) -> SafetyRuntime:
    return SafetyRuntime(SafetyConfig.model_validate(config), Registry(), data_dir=tmp_path)


async def test_policy_change_swaps_guardrails_and_reuses_unchanged_checks(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
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


async def test_config_reload_keeps_admin_overrides(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    await rt.put_policy("strict", {"input": ["pii"], "actions": {"pii": "block"}})
    await rt.map_alias("tiny", "strict")
    reloaded = {**BASE, "policies": {"default": {"input": []}}}
    rt.set_base(SafetyConfig.model_validate(reloaded))
    assert rt.config.policies["default"].input == []
    assert rt.stage.policy_for("tiny", None).name == "strict"
    await rt.aclose()


async def test_other_process_sees_overrides_through_the_data_dir(tmp_path: Path) -> None:
    writer, reader = _runtime(tmp_path), _runtime(tmp_path)
    await writer.put_policy("strict", {"input": ["pii"], "actions": {"pii": "block"}})
    await writer.map_team("finance", "strict")
    reader._reload_if_changed()
    assert reader.stage.policy_for("tiny", "finance").name == "strict"
    third = _runtime(tmp_path)  # a process started later reads them at start
    assert third.config.teams == {"finance": "strict"}
    for rt in (writer, reader, third):
        await rt.aclose()


async def test_replaced_checks_are_closed_after_a_grace_period_not_kept_forever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fleetgate.safety.runtime as runtime_module

    rt = _runtime(tmp_path)
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
