"""Exact money: integer nano-USD (1e-9 USD) computed from decimal prices.

Floats never touch a cost: a price of 0.15 USD per million tokens is ``Decimal("0.15")`` and a
request's cost is rounded once, to the nano-dollar, so sums over any number of requests agree
to the cent with an independent calculation.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from functools import lru_cache

from fleetgate.contract.request import Outcome, Prices

__all__ = [
    "NANO",
    "cost_nusd",
    "nusd_to_usd",
    "outcome_cost_nusd",
    "unit_cost_nusd",
    "usd_to_nusd",
]

NANO = 1_000_000_000
_PER_TOKEN = Decimal(NANO) / Decimal(1_000_000)  # nano-USD per token at 1 USD per Mtok


def _dec(value: float) -> Decimal:
    return Decimal(repr(value))


def cost_nusd(
    price: Prices | None,
    prompt: int,
    completion: int,
    cached: int,
    *,
    cache_write: int = 0,
    batch: bool = False,
) -> int:
    """The cost in nano-USD of ``prompt`` tokens (all of them, as OpenAI counts: of which
    ``cached`` were read from the upstream's prompt cache and ``cache_write`` written to it)
    and ``completion`` tokens. Cache reads at ``cached_input_per_mtok``, cache writes at
    ``cache_write_input_per_mtok`` (each at the input price when not set), the rest at
    ``input_per_mtok``; ``batch``: a batch-lane request, less the price's ``batch_discount``.

    Example: 1,000 prompt tokens of which 800 cached and 100 written, 50 completion tokens at
    input 3, cached 0.3, write 3.75, output 15 USD/Mtok: 100 × 3000 + 800 × 300 + 100 × 3750
    + 50 × 15000 = 1,665,000 nano-USD.
    """
    if price is None:
        return 0
    cached = max(0, min(cached, prompt))
    written = max(0, min(cache_write, prompt - cached))
    rate_in, rate_cached, rate_write, rate_out = _rates(
        price.input_per_mtok,
        price.cached_input_per_mtok,
        price.cache_write_input_per_mtok,
        price.output_per_mtok,
    )
    total = (
        (prompt - cached - written) * rate_in
        + cached * rate_cached
        + written * rate_write
        + completion * rate_out
    )
    if batch and price.batch_discount:
        total = total * (1 - _dec(price.batch_discount))
    if isinstance(total, int):  # every rate a whole number of nano-USD: exact already
        return total
    return int(total.to_integral_value(rounding=ROUND_HALF_EVEN))


@lru_cache(maxsize=1024)
def _rates(
    input_per_mtok: float,
    cached_per_mtok: float | None,
    write_per_mtok: float | None,
    output_per_mtok: float,
) -> tuple[int | Decimal, int | Decimal, int | Decimal, int | Decimal]:
    """Nano-USD per token of a price (a request path call: the few prices are kept); a
    whole number of nano-USD as an ``int`` (most prices: 0.15 USD/Mtok is 150), so a cost
    is integer arithmetic unless a rate has a fraction of a nano-dollar."""
    cached = input_per_mtok if cached_per_mtok is None else cached_per_mtok
    write = input_per_mtok if write_per_mtok is None else write_per_mtok
    return (
        _per_token(input_per_mtok),
        _per_token(cached),
        _per_token(write),
        _per_token(output_per_mtok),
    )


def _per_token(per_mtok: float) -> int | Decimal:
    rate = _dec(per_mtok) * _PER_TOKEN
    return int(rate) if rate == rate.to_integral_value() else rate


def outcome_cost_nusd(outcome: Outcome) -> int:
    """A finished request's cost: the one already set on ``outcome`` (a priced unit such as
    audio minutes), else its tokens at its price (`cost_nusd`)."""
    if outcome.cost_nusd is not None:
        return outcome.cost_nusd
    return cost_nusd(
        outcome.price,
        outcome.prompt_tokens,
        outcome.completion_tokens,
        outcome.cached_tokens,
        cache_write=outcome.cache_write_tokens,
        batch=outcome.batch,
    )


def unit_cost_nusd(usd_per_block: float | None, units: float, block: float) -> int:
    """The cost of ``units`` at ``usd_per_block`` per ``block`` units (e.g. USD per 60 seconds
    of audio, per 1,000,000 characters), in nano-USD; 0 without a price."""
    if usd_per_block is None or units <= 0:
        return 0
    return usd_to_nusd(_dec(usd_per_block) * _dec(units) / _dec(block))


def usd_to_nusd(usd: float | str | Decimal) -> int:
    value = usd if isinstance(usd, Decimal) else Decimal(str(usd))
    return int((value * NANO).to_integral_value(rounding=ROUND_HALF_EVEN))


def nusd_to_usd(nusd: int) -> float:
    """USD as a float, for JSON and gauges (exact to well below a cent)."""
    return float(Decimal(nusd) / NANO)
