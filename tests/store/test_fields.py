"""Values that fit their columns: clamped when the gateway made them, refused (400) when a
caller sent them."""

from __future__ import annotations

import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.store.fields import RowShape, require_fits
from fleetgate.tenancy.tables import spend
from tests.store.test_bulk import _row


def test_a_row_is_clamped_to_its_columns() -> None:
    fitted = dict(zip(RowShape(spend).names, RowShape(spend).fit(_row(
        "r", alias="m" * 300, status=2**40, latency_ms=-(2**40), cost_nusd=2**70,
        deployment="a\x00b", input_tokens=3.0, tags=None,
    )), strict=True))  # fmt: skip
    assert fitted["alias"] == "m" * 200
    assert fitted["status"] == 2**31 - 1 and fitted["latency_ms"] == -(2**31)
    assert fitted["cost_nusd"] == 2**63 - 1
    assert fitted["deployment"] == "a\ufffdb"
    assert fitted["input_tokens"] == 3
    assert fitted["tags"] == "null"  # as SQLAlchemy stores a JSON None


def test_what_a_caller_sent_is_refused_when_it_cannot_be_stored() -> None:
    assert require_fits("m" * 200, spend.c.alias, "model") == "m" * 200
    for bad in ("m" * 201, "a\x00b"):
        with pytest.raises(InvalidRequest) as err:
            require_fits(bad, spend.c.alias, "model")
        assert err.value.param == "model"
