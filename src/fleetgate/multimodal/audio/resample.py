"""Polyphase resampling (``scipy.signal.resample_poly``), whole or block by block.

`StreamResampler` takes the decoder's blocks as they come and gives back the same samples
``resample`` would give for the whole signal (to float rounding), while holding only a short
context of input: decoding a long file costs memory for its 16 kHz result, not for its input at
the source rate. Blocks are cut at multiples of the ratio's denominator, so each maps onto whole
output samples, and every block is filtered with enough input on both sides that the filter
never sees an edge that is not the signal's own.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetgate.extras import require

__all__ = ["TARGET_RATE", "StreamResampler", "resample"]

TARGET_RATE = 16_000
Samples = npt.NDArray[np.float32]
_HALF_LEN = 10  # resample_poly's filter: 10 x max(up, down) taps either side at the high rate


def _ratio(rate: int, target: int) -> Fraction:
    return Fraction(target, rate).limit_denominator(1000)


def _signal() -> Any:
    # Imported here: scipy.signal takes half a second to import, most processes never resample
    # (the gateway imports this module at start-up for its audio routes), and scipy is optional.
    return require("scipy.signal", extra="audio", purpose="resampling audio")


def resample(samples: Samples, rate: int, target: int = TARGET_RATE) -> Samples:
    """``samples`` at ``rate`` resampled to ``target`` Hz."""
    if rate == target:
        return samples.astype(np.float32, copy=False)
    ratio = _ratio(rate, target)
    out = _signal().resample_poly(samples, ratio.numerator, ratio.denominator)
    return np.asarray(out, dtype=np.float32)


class StreamResampler:
    """Resamples a signal fed in blocks; :meth:`push` and :meth:`finish` return what is ready.

    Example::

        rs = StreamResampler(44_100)
        out = [rs.push(block) for block in blocks] + [rs.finish()]
    """

    def __init__(self, rate: int, target: int = TARGET_RATE) -> None:
        self._ratio = _ratio(rate, target)
        self._signal = None if rate == target else _signal()
        up, down = self._ratio.numerator, self._ratio.denominator
        reach = -(-_HALF_LEN * max(up, down) // up)  # input samples the filter reaches
        self._context = (-(-reach // down) + 1) * down
        self._step = max(1, 65_536 // down) * down
        self._left = np.zeros(0, np.float32)  # input already resampled, kept as context
        self._pending = np.zeros(0, np.float32)  # input not yet resampled

    def _filter(self, signal: Samples, skip: int, take: int | None) -> Samples:
        up, down = self._ratio.numerator, self._ratio.denominator
        out = self._signal.resample_poly(signal, up, down) if self._signal else signal
        first = skip * up // down
        last = None if take is None else first + take * up // down
        return np.asarray(out[first:last], dtype=np.float32)

    def push(self, block: Samples) -> Samples:
        """Feed ``block``; the resampled samples that no later input can change."""
        if self._signal is None:
            return block.astype(np.float32, copy=False)
        self._pending = np.concatenate([self._pending, block])
        ready: list[Samples] = []
        while len(self._pending) >= self._step + self._context:
            signal = np.concatenate([self._left, self._pending[: self._step + self._context]])
            ready.append(self._filter(signal, len(self._left), self._step))
            self._left = self._pending[self._step - self._context : self._step]
            self._pending = self._pending[self._step :]
        return np.concatenate(ready) if ready else np.zeros(0, np.float32)

    def finish(self) -> Samples:
        """The rest, once the signal has ended."""
        if self._signal is None or len(self._pending) == 0:
            return np.zeros(0, np.float32)
        signal = np.concatenate([self._left, self._pending])
        self._pending = np.zeros(0, np.float32)
        return self._filter(signal, len(self._left), None)
