"""Request policy: band from config, tags and header (lower only), deadlines, reject."""

from __future__ import annotations

from typing import Any

import pytest

from fleetgate.contract.principal import Principal
from fleetgate.errors import InvalidRequest
from fleetgate.scheduling.config import SchedulingConfig
from fleetgate.scheduling.policy import Policies, resolve


def _config(**fields: Any) -> SchedulingConfig:
    return SchedulingConfig.model_validate(fields)


def _key(team: str = "t1", key: str = "k1", **tags: str) -> Principal:
    return Principal(key, team_id=team, tags=tuple(sorted(tags.items())))


def test_default_band_and_team() -> None:
    p = resolve(_config(), _key(), {})
    assert (p.team, p.band, p.weight, p.reject, p.deadline_s) == (
        "t1", "interactive", 1.0, False, None
    )  # fmt: skip
    assert p.max_wait_s == 10.0


def test_band_from_key_config_then_team_config_then_tag() -> None:
    config = _config(
        teams={"t1": {"band": "batch", "weight": 3}}, keys={"k1": {"band": "critical"}}
    )
    assert resolve(config, _key(priority="sheddable"), {}).band == "critical"
    assert resolve(config, _key(key="k2", priority="sheddable"), {}).band == "batch"
    assert resolve(_config(), _key(priority="critical"), {}).band == "critical"
    assert resolve(_config(), _key(priority="nonsense"), {}).band == "interactive"
    assert resolve(config, _key(key="k2"), {}).weight == 3


@pytest.mark.parametrize(
    ("assigned", "asked", "got"),
    [
        ("interactive", "batch", "batch"),
        ("interactive", "critical", "interactive"),  # never raised
        ("batch", "interactive", "batch"),
        ("critical", "sheddable", "sheddable"),
        ("sheddable", "critical", "sheddable"),
        ("batch", " BATCH ", "batch"),
    ],
)
def test_the_header_lowers_never_raises(assigned: str, asked: str, got: str) -> None:
    p = resolve(_config(), _key(priority=assigned), {"x-fleetgate-priority": asked})
    assert p.band == got


@pytest.mark.parametrize("value", ["urgent", "", "0"])
def test_an_unknown_priority_header_is_a_400(value: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        resolve(_config(), _key(), {"x-fleetgate-priority": value})
    assert err.value.status == 400 and err.value.param == "x-fleetgate-priority"


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "inf", "1e12"])
def test_a_bad_deadline_header_is_a_400(value: str) -> None:
    with pytest.raises(InvalidRequest):
        resolve(_config(), _key(), {"x-fleetgate-ttft-deadline-ms": value})


def test_deadline_from_header_else_key_else_team_else_tag() -> None:
    config = _config(
        teams={"t1": {"ttft_deadline_ms": 800}}, keys={"k1": {"ttft_deadline_ms": 300}}
    )
    assert resolve(config, _key(), {"x-fleetgate-ttft-deadline-ms": "1500"}).deadline_s == 1.5
    assert resolve(config, _key(), {}).deadline_s == 0.3
    assert resolve(config, _key(key="k2"), {}).deadline_s == 0.8
    assert resolve(_config(), _key(ttft_deadline_ms="250"), {}).deadline_s == 0.25
    assert resolve(_config(), _key(ttft_deadline_ms="soon"), {}).deadline_s is None


def test_reject_and_max_wait_per_team_and_key() -> None:
    config = _config(
        teams={"t1": {"on_saturation": "reject", "max_wait_s": 60}},
        keys={"k2": {"on_saturation": "queue", "max_wait_s": 2}},
    )
    p1 = resolve(config, _key(), {})
    assert p1.reject and p1.max_wait_s == 10.0  # never above the band's wait
    p2 = resolve(config, _key(key="k2"), {})
    assert not p2.reject and p2.max_wait_s == 2.0


def test_the_band_wait_follows_the_lowered_band() -> None:
    config = _config(max_wait_s={"interactive": 5, "sheddable": 1})
    p = resolve(config, _key(), {"x-fleetgate-priority": "sheddable"})
    assert p.max_wait_s == 1.0


def test_the_master_key_is_its_own_team() -> None:
    p = resolve(_config(), Principal("master", role="master"), {})
    assert p.team == "master"


def test_policies_remember_a_key_until_the_config_changes() -> None:
    config = _config(teams={"t1": {"band": "batch"}})
    policies = Policies(config)
    first = policies.of(_key(), {})
    assert first.band == "batch" and policies.of(_key(), {}) is first
    assert policies.of(_key(priority="critical"), {}).band == "batch"  # other tags: resolved
    lowered = policies.of(_key(), {"x-fleetgate-priority": "sheddable"})
    assert lowered.band == "sheddable" and policies.of(_key(), {}) is first
    assert Policies(_config()).of(_key(), {}).band == "interactive"
