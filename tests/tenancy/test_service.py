"""Times given to the admin API: epoch seconds or ISO-8601, UTC unless a zone is given."""

from __future__ import annotations

import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.tenancy.service import parse_time_ms


def test_times_without_a_zone_are_utc_whatever_the_server_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert parse_time_ms("2026-01-01T00:00:00", "since") == 1_767_225_600_000
        assert parse_time_ms("2026-01-01T00:00:00Z", "since") == 1_767_225_600_000
        assert parse_time_ms("2026-01-01T01:00:00+01:00", "since") == 1_767_225_600_000
        assert parse_time_ms(1_767_225_600, "since") == 1_767_225_600_000
        assert parse_time_ms("1767225600.5", "since") == 1_767_225_600_500
        assert parse_time_ms(None, "since") is None
        with pytest.raises(InvalidRequest) as caught:
            parse_time_ms("next tuesday", "until")
        assert caught.value.param == "until"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
