"""`fleetgate.importers.reimport`: a re-import tightens what fleetgate holds, never loosens."""

from __future__ import annotations

from typing import Any

from fleetgate.importers.reimport import merge_key, merge_team


def _key(**fields: Any) -> dict[str, Any]:
    row = {"id": "key_ll_1", "key_hash": "ab" * 32, "key_hint": "alpha", "team_id": "team_a",
           "user_id": None, "role": "user", "aliases": None, "rpm": None, "tpm": None,
           "max_parallel": None, "max_budget_nusd": None, "budget_period": None, "tags": {},
           "expires_ms": None, "revoked_ms": None, "created_ms": 1}  # fmt: skip
    return {**row, **fields}


def test_a_key_revoked_in_fleetgate_stays_revoked() -> None:
    row, _ = merge_key(_key(revoked_ms=5), _key(revoked_ms=None), "key alpha")
    assert row["revoked_ms"] == 5
    # blocked in LiteLLM since: revoked here too
    row, _ = merge_key(_key(), _key(revoked_ms=9), "key alpha")
    assert row["revoked_ms"] == 9


def test_limits_budgets_expiry_allowlist_and_role_only_tighten() -> None:
    old = _key(rpm=10, tpm=None, max_budget_nusd=10**9, budget_period="monthly",
               aliases=["tiny"], expires_ms=1000, role="user", team_id="team_moved",
               user_id="u1")  # fmt: skip
    new = _key(rpm=60, tpm=500, max_budget_nusd=None, budget_period=None,
               aliases=None, expires_ms=None, role="team_admin")  # fmt: skip
    row, notes = merge_key(old, new, "key alpha")
    assert (row["rpm"], row["tpm"]) == (10, 500)
    assert (row["max_budget_nusd"], row["budget_period"]) == (10**9, "monthly")
    assert row["aliases"] == ["tiny"] and row["expires_ms"] == 1000 and row["role"] == "user"
    assert (row["team_id"], row["user_id"]) == ("team_moved", "u1")
    assert any("rpm" in n for n in notes) and any("allowlist" in n for n in notes)
    # LiteLLM tighter: taken
    row, _ = merge_key(old, _key(rpm=5, max_budget_nusd=10**8, budget_period="monthly",
                                 aliases=["tiny", "other"], expires_ms=500), "k")  # fmt: skip
    assert (row["rpm"], row["max_budget_nusd"], row["expires_ms"]) == (5, 10**8, 500)
    assert row["aliases"] == ["tiny"]


def test_a_budget_over_another_period_keeps_fleetgates() -> None:
    old = _key(max_budget_nusd=10**9, budget_period="daily")
    row, _ = merge_key(old, _key(max_budget_nusd=10**8, budget_period="monthly"), "k")
    assert (row["max_budget_nusd"], row["budget_period"]) == (10**9, "daily")


def test_a_team_keeps_its_name_and_payload_logging_and_only_tightens() -> None:
    old = {"id": "team_ll_1", "name": "renamed", "rpm": 100, "tpm": None, "max_parallel": 2,
           "max_budget_nusd": None, "budget_period": None, "log_payloads": False,
           "tags": {"cost_center": "7"}, "created_ms": 1}  # fmt: skip
    new = {**old, "name": "search-team", "rpm": 120, "max_parallel": None,
           "log_payloads": True, "tags": {"litellm_team_id": "x"}}  # fmt: skip
    row, _ = merge_team(old, new, "team search-team")
    assert (row["name"], row["rpm"], row["max_parallel"], row["log_payloads"]) == (
        "renamed", 100, 2, False,
    )  # fmt: skip
    assert row["tags"] == {"cost_center": "7", "litellm_team_id": "x"}
