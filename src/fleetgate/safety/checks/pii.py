"""PII and secret detection with mask or block.

Detects e-mail addresses, phone numbers (international ``+CC ...``, mainland China mobile,
North American), payment cards (Luhn-valid, 13-19 digits), the 18-digit mainland China resident
ID (ISO 7064 MOD 11-2 check digit and a plausible birth date), US SSNs, and API-key-like secrets
(``sk-...``, ``AKIA...``, ``ghp_...``, ``xox?-...``, ``AIza...``, long high-entropy tokens).

Example::

    check = PIICheck(mode="mask")
    v = await check.check("mail me: li@example.cn", CheckContext())
    v.masked_text  # 'mail me: [EMAIL]'
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from fleetgate.errors import ConfigError
from fleetgate.safety.base import CheckContext, Verdict
from fleetgate.safety.offload import TextWorker

__all__ = ["PII_KINDS", "PIICheck", "china_id_valid", "find_pii", "luhn_valid"]

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"


def china_id_valid(value: str) -> bool:
    """True for an 18-character mainland China resident ID with a valid MOD 11-2 check digit."""
    value = value.upper()
    if len(value) != 18 or not value[:17].isdigit() or value[17] not in "0123456789X":
        return False
    month, day = int(value[10:12]), int(value[12:14])
    if not (1 <= month <= 12 and 1 <= day <= 31 and value[6:8] in ("18", "19", "20")):
        return False
    total = sum(int(d) * w for d, w in zip(value[:17], _ID_WEIGHTS, strict=True))
    return _ID_CHECK[total % 11] == value[17]


def luhn_valid(digits: str) -> bool:
    """The Luhn (mod 10) check used by payment card numbers."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _entropy(token: str) -> float:
    counts = Counter(token)
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _digits(s: str) -> str:
    return "".join(ch for ch in s if ch.isdigit())


def _card_ok(s: str) -> bool:
    d = _digits(s)
    return 13 <= len(d) <= 19 and luhn_valid(d)


def _intl_phone_ok(s: str) -> bool:
    return 8 <= len(_digits(s)) <= 15


def _high_entropy(s: str) -> bool:
    has_kinds = sum(
        (any(c.isdigit() for c in s), any(c.isupper() for c in s), any(c.islower() for c in s))
    )
    return has_kinds == 3 and _entropy(s) >= 4.2


@dataclass(frozen=True, slots=True)
class _Detector:
    kind: str
    label: str
    regex: re.Pattern[str]
    valid: Callable[[str], bool] | None = None


def _detectors() -> tuple[_Detector, ...]:
    # Order is priority: on overlapping matches the earlier detector wins.
    return (
        _Detector("secret", "[SECRET]", re.compile(
            r"\b(?:sk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}"
            r"|github_pat_[A-Za-z0-9_]{40,}|xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})")),
        _Detector("secret", "[SECRET]", re.compile(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_=-]{32,}"),
                  _high_entropy),
        # The local part starts where a run of its characters starts: tried from every
        # position of a long run, it would rescan the run each time (quadratic).
        _Detector("email", "[EMAIL]", re.compile(
            r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+"
            r"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")),
        _Detector("national_id", "[NATIONAL_ID]", re.compile(
            r"(?<![0-9A-Za-z])\d{17}[\dXx](?![0-9A-Za-z])"),
                  china_id_valid),
        _Detector("ssn", "[SSN]", re.compile(
            r"(?<![\d-])(?!000|666|9\d\d)\d{3}[- ](?!00)\d{2}[- ](?!0000)\d{4}(?![\d-])")),
        _Detector("card", "[CARD]", re.compile(
            r"(?<![\d+-])\d(?:[ -]?\d){12,18}(?![\d-])"), _card_ok),
        _Detector("phone", "[PHONE]", re.compile(
            r"(?<![\d+])(?:\+?86[ -]?)?1[3-9]\d[ -]?\d{4}[ -]?\d{4}(?!\d)")),
        _Detector("phone", "[PHONE]", re.compile(r"(?<![\w+])\+\d[\d ().-]{6,20}\d(?!\d)"),
                  _intl_phone_ok),
        _Detector("phone", "[PHONE]", re.compile(
            r"(?<![\d-])(?:\(\d{3}\) ?|\d{3}[.-])\d{3}[.-]\d{4}(?![\d-])")),
    )  # fmt: skip


PII_KINDS = frozenset({"email", "phone", "card", "national_id", "ssn", "secret"})


@dataclass(frozen=True, slots=True)
class PIIMatch:
    kind: str
    start: int
    end: int
    label: str


def find_pii(
    text: str, kinds: Iterable[str] = PII_KINDS, detectors: tuple[_Detector, ...] | None = None
) -> list[PIIMatch]:
    """Non-overlapping PII matches in ``text``, in text order (on overlap, the earlier
    detector's match wins)."""
    wanted = set(kinds)
    taken: list[PIIMatch] = []  # in text order, none overlapping
    for det in detectors or _detectors():
        if det.kind not in wanted:
            continue
        found = (
            PIIMatch(det.kind, m.start(), m.end(), det.label)
            for m in det.regex.finditer(text)
            if det.valid is None or det.valid(m.group(0))
        )
        taken = _merge(taken, found)
    return taken


def _merge(taken: list[PIIMatch], found: Iterable[PIIMatch]) -> list[PIIMatch]:
    """``taken`` with each of ``found`` (in text order) that overlaps none of them, in one walk
    over both (comparing each new match with every taken one is quadratic in the matches)."""
    out: list[PIIMatch] = []
    i = 0
    for new in found:
        while i < len(taken) and taken[i].end <= new.start:
            out.append(taken[i])
            i += 1
        if i < len(taken) and taken[i].start < new.end:
            continue  # overlaps a taken match
        out.append(new)
    out.extend(taken[i:])
    return out


class PIICheck:
    """Masks (``[EMAIL]``, ``[PHONE]``, ...) or blocks text containing PII.

    ``kinds`` limits detection (default: all of :data:`PII_KINDS`); categories read
    ``pii_<kind>``. A long text is searched in ``worker`` (`TextWorker`: a process, off the
    event loop); without one the check makes its own and stops it in `close`.
    """

    def __init__(
        self,
        *,
        mode: Literal["mask", "block"] = "mask",
        kinds: Iterable[str] = PII_KINDS,
        name: str = "pii",
        worker: TextWorker | None = None,
    ) -> None:
        unknown = set(kinds) - PII_KINDS
        if unknown:
            raise ConfigError(f"safety pii: unknown kinds {sorted(unknown)}")
        self.name = name
        self.mode = mode
        self._kinds = frozenset(kinds)
        self._detectors = _detectors()
        self._own_worker = worker is None
        self._worker: TextWorker | None = worker or TextWorker()

    def __getstate__(self) -> dict[str, object]:
        # what the worker process gets: the detectors, not the worker
        return {**self.__dict__, "_worker": None, "_own_worker": False}

    def mask(self, text: str) -> tuple[str, list[str]]:
        """``text`` with PII replaced by labels, and the kinds found."""
        matches = find_pii(text, self._kinds, self._detectors)
        if not matches:
            return text, []
        out: list[str] = []
        pos = 0
        for m in matches:
            out.append(text[pos : m.start])
            out.append(m.label)
            pos = m.end
        out.append(text[pos:])
        return "".join(out), sorted({m.kind for m in matches})

    async def check(self, text: str, ctx: CheckContext) -> Verdict:
        if self._worker is None:  # an unpickled copy (in the worker process)
            masked, kinds = self.mask(text)
        else:
            masked, kinds = await self._worker.run(self.mask, text, size=len(text))
        if not kinds:
            return Verdict.allow(self.name)
        categories = [f"pii_{k}" for k in kinds]
        if self.mode == "block":
            return Verdict.block(self.name, categories, detail="personal data in text")
        return Verdict.mask(self.name, categories, masked, detail="personal data masked")

    def close(self) -> None:
        """Stop the worker process if this check made its own."""
        if self._own_worker and self._worker is not None:
            self._worker.close()
