"""What one benchmark request is: the prompt, its lengths, whether it streams, when it is due.

``RequestSpec`` is what datasets produce and what the runner sends; ``RequestRecord`` is what
the runner measured for it. Times in a record are seconds relative to the run's start, read from
``time.perf_counter`` (one clock for the whole run, so records from several worker processes
line up).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["RequestRecord", "RequestSpec"]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request to send.

    ``input_len`` is the intended prompt length in tokens (an estimate unless the dataset
    counted it); the server's ``usage.prompt_tokens`` replaces it when present.
    ``at`` is the trace offset in seconds (trace replay only).
    """

    prompt: str
    input_len: int
    output_len: int
    stream: bool = True
    at: float | None = None
    messages: tuple[dict[str, Any], ...] | None = None


@dataclass(slots=True)
class RequestRecord:
    """What was measured for one request (vLLM's ``RequestFuncOutput`` plus schedule fields).

    - ``intended``: when the schedule said to send it; ``sent``: when it was really sent;
      their difference is the schedule lag (coordinated omission made visible).
    - ``ttft``: send -> first chunk with a choice (streaming only, else ``None``).
    - ``itl``: gaps between consecutive chunks carrying a choice (vLLM's per-chunk ITL).
    - ``chunk_tokens``: tokens each of those later chunks carried, when the server reported
      per-chunk usage; ``None`` otherwise.
    - ``latency``: send -> last data message (vLLM's E2E latency).
    - ``output_tokens``: server ``usage.completion_tokens`` when ``usage_reported``, else the
      number of chunks carrying a choice (streaming) or 0.
    """

    index: int
    intended: float
    sent: float = 0.0
    stream: bool = True
    success: bool = False
    error: str = ""
    status: int = 0
    ttft: float | None = None
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    chunk_tokens: list[int] | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    usage_reported: bool = False

    @property
    def lag(self) -> float:
        """Seconds the send happened after its intended time (never negative in practice)."""
        return self.sent - self.intended

    def to_row(self) -> dict[str, Any]:
        """A flat dict for CSV and detailed JSON (milliseconds)."""
        return {
            "index": self.index,
            "stream": self.stream,
            "success": self.success,
            "status": self.status,
            "intended_ms": round(self.intended * 1000, 4),
            "sent_ms": round(self.sent * 1000, 4),
            "schedule_lag_ms": round(self.lag * 1000, 4),
            "ttft_ms": None if self.ttft is None else round(self.ttft * 1000, 4),
            "e2el_ms": round(self.latency * 1000, 4),
            "chunks": len(self.itl) + (1 if self.ttft is not None else 0),
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "usage_reported": self.usage_reported,
            "error": self.error,
        }
