"""``fleetgate config reference`` spells a field's type as a reader writes it in the YAML: an
annotated type (a shared validator, as `HttpUrl`) by the type it annotates, never by its
validator objects (which print a function's address, different on every run)."""

from __future__ import annotations

from pydantic import BaseModel

from fleetgate.cli.reference import fields
from fleetgate.config.types import HttpUrl
from fleetgate.cost.config import PoolConfig
from fleetgate.reclaim.config import ReclaimPool


class _Urls(BaseModel):
    one: HttpUrl
    many: tuple[HttpUrl, ...] = ()
    maybe: HttpUrl | None = None


def test_an_annotated_type_is_spelled_as_the_type_it_annotates() -> None:
    types = {path: spelled for path, spelled, _, _ in fields(_Urls, "")}
    assert types == {"one": "str", "many": "tuple[str, ...]", "maybe": "str \\| None"}


def test_the_dcgm_urls_of_cost_and_reclaim_share_the_check() -> None:
    for model, extra in ((PoolConfig, {"alias": "chat"}), (ReclaimPool, {"deployment": "a"})):
        types = {path: spelled for path, spelled, _, _ in fields(model, "")}
        assert types["dcgm"] == "tuple[str, ...]"
        try:
            model.model_validate({**extra, "dcgm": ["http://gpu-1:9400/metrics", "gpu-2:9400"]})
        except ValueError as e:
            assert "'gpu-2:9400': must start with http:// or https://" in str(e)
        else:
            raise AssertionError(f"{model.__name__} took a URL without a scheme")
