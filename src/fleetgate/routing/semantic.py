"""Intent classification for the semantic router: keyword rules first, then embeddings.

Rules (case-insensitive substrings and regular expressions per intent) are tried in the
configured intent order; the first match decides. Otherwise a softmax regression trained on
the sentence embeddings of labelled examples scores each intent; below ``min_score`` the
default intent is used. Example embeddings are cached on disk, keyed by a hash of the
encoder's name and the examples, so a restart does not re-embed them.

Example::

    router = IntentRouter.from_config(cfg)                  # cfg: SemanticConfig
    router.fit(cached_embeddings(encoder.name, [e.text for e in router.examples],
                                 encoder.encode, data_dir / "semantic"))
    decision = router.by_rule(text) or router.by_vector(encoder.encode([text])[0])
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from fleetgate.errors import ConfigError
from fleetgate.resources.embedder import Vectors
from fleetgate.routing.semantic_config import SemanticConfig

__all__ = [
    "IntentModel",
    "IntentRouter",
    "IntentRules",
    "LabelledText",
    "RouteDecision",
    "cached_embeddings",
    "load_examples",
    "shipped_examples",
    "shipped_rules",
]


@dataclass(frozen=True, slots=True)
class LabelledText:
    intent: str
    text: str


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """What the router decided for one request."""

    intent: str
    alias: str
    reasoning: bool
    retrieval: bool
    score: float  # the classifier's probability (1.0 for a rule, 0.0 for the default)
    source: str  # "rule" | "embedding" | "default"

    def header(self) -> str:
        """The ``x-fleetgate-route`` header value."""
        return (
            f"intent={self.intent}; alias={self.alias}; "
            f"reasoning={'on' if self.reasoning else 'off'}; "
            f"retrieval={'yes' if self.retrieval else 'no'}; "
            f"score={self.score:.2f}; source={self.source}"
        )


def load_examples(lines: Iterable[str]) -> list[LabelledText]:
    """Parse JSON lines ``{"intent": ..., "text": ...}`` (blank lines skipped)."""
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out.append(LabelledText(str(row["intent"]), str(row["text"])))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"examples line {n}: expected {{intent, text}}: {exc}") from None
    return out


def _data(name: str) -> str:
    return (Path(__file__).parent / "data" / name).read_text("utf-8")


def shipped_examples() -> list[LabelledText]:
    """The default labelled examples (English and Chinese)."""
    return load_examples(_data("intents.jsonl").splitlines())


def shipped_rules() -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """The default keyword rules: intent -> (keywords, patterns)."""
    raw = json.loads(_data("intent_rules.json"))
    return {
        k: (tuple(v.get("keywords", ())), tuple(v.get("patterns", ())))
        for k, v in raw.items()
        if not k.startswith("_")
    }


class IntentRules:
    """Keyword and regex rules per intent, tried in order; the first match wins."""

    def __init__(self, rules: Sequence[tuple[str, Sequence[str], Sequence[str]]]) -> None:
        self._rules = [
            (intent, tuple(k.lower() for k in keywords),
             [re.compile(p, re.IGNORECASE) for p in patterns])
            for intent, keywords, patterns in rules
        ]  # fmt: skip

    def match(self, text: str) -> str | None:
        lowered = text.lower()
        for intent, keywords, patterns in self._rules:
            if any(k in lowered for k in keywords) or any(p.search(text) for p in patterns):
                return intent
        return None


class IntentModel:
    """Multinomial logistic regression over unit-length embeddings (deterministic fit)."""

    def __init__(self, intents: Sequence[str], *, scale: float = 10.0, l2: float = 1e-3) -> None:
        self.intents = list(intents)
        self._scale = scale
        self._l2 = l2
        self._w: npt.NDArray[np.float64] | None = None
        self._b: npt.NDArray[np.float64] | None = None

    def fit(self, x: Vectors, labels: Sequence[str], *, steps: int = 500, lr: float = 0.5) -> None:
        index = {name: i for i, name in enumerate(self.intents)}
        y = np.eye(len(self.intents))[[index[label] for label in labels]]
        xs = x.astype(np.float64) * self._scale
        w = np.zeros((x.shape[1], len(self.intents)))
        b = np.zeros(len(self.intents))
        for _ in range(steps):
            p = _softmax(xs @ w + b)
            grad = (p - y) / len(xs)
            w -= lr * (xs.T @ grad + self._l2 * w)
            b -= lr * grad.sum(0)
        self._w, self._b = w, b

    def scores(self, vector: Vectors) -> npt.NDArray[np.float64]:
        """Probability per intent, in ``self.intents`` order."""
        if self._w is None or self._b is None:
            raise RuntimeError("IntentModel.fit() was not called")
        z = (vector.astype(np.float64) * self._scale) @ self._w + self._b
        out: npt.NDArray[np.float64] = _softmax(z[None, :])[0]
        return out


def _softmax(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    out: npt.NDArray[np.float64] = e / e.sum(axis=1, keepdims=True)
    return out


def cached_embeddings(
    identity: str, texts: Sequence[str], embed: Callable[[Sequence[str]], Vectors], cache_dir: Path
) -> Vectors:
    """``embed(texts)`` in batches, cached in ``cache_dir`` by a hash of identity and texts."""
    digest = hashlib.sha256("\n".join([identity, *texts]).encode()).hexdigest()[:24]
    path = cache_dir / f"examples-{digest}.npy"
    try:
        cached: Vectors = np.load(path)
        if cached.shape[0] == len(texts):
            return cached
    except (OSError, ValueError):
        pass
    parts = [embed(texts[i : i + 32]) for i in range(0, len(texts), 32)]
    vectors = np.concatenate(parts).astype(np.float32)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        np.save(f, vectors)
    os.replace(tmp, path)
    return vectors


class IntentRouter:
    """Rules + classifier + the config's intent table → `RouteDecision`."""

    def __init__(
        self, config: SemanticConfig, examples: Sequence[LabelledText], rules: IntentRules
    ) -> None:
        self.config = config
        self.examples = [e for e in examples if e.intent in config.intents]
        missing = sorted(set(config.intents) - {e.intent for e in self.examples})
        if missing:
            raise ConfigError(f"semantic: no examples for intent(s) {', '.join(missing)}")
        self.rules = rules
        self.model = IntentModel(list(config.intents))

    @classmethod
    def from_config(
        cls, config: SemanticConfig, extra: Sequence[LabelledText] = ()
    ) -> IntentRouter:
        """Shipped examples and rules (unless turned off) plus the config's own."""
        examples = list(shipped_examples()) if config.shipped_examples else []
        examples += extra
        for name, intent in config.intents.items():
            examples += [LabelledText(name, t) for t in intent.examples]
        shipped = shipped_rules() if config.shipped_rules else {}
        table: list[tuple[str, Sequence[str], Sequence[str]]] = []
        for name, intent in config.intents.items():
            keywords, patterns = shipped.get(name, ((), ()))
            table.append((name, (*keywords, *intent.keywords), (*patterns, *intent.patterns)))
        return cls(config, examples, IntentRules(table))

    def fit(self, vectors: Vectors) -> None:
        """Train on the embeddings of ``self.examples`` (same order)."""
        self.model.fit(vectors, [e.intent for e in self.examples])

    def decide(self, intent: str, score: float, source: str) -> RouteDecision:
        cfg = self.config.intents[intent]
        return RouteDecision(intent, cfg.alias, cfg.reasoning, cfg.retrieval, score, source)

    def by_rule(self, text: str) -> RouteDecision | None:
        intent = self.rules.match(text)
        return None if intent is None else self.decide(intent, 1.0, "rule")

    def by_vector(self, vector: Vectors) -> RouteDecision:
        scores = self.model.scores(vector)
        best = int(scores.argmax())
        score = float(scores[best])
        if score < self.config.min_score:
            return self.decide(self.config.fallback_intent, score, "default")
        return self.decide(self.model.intents[best], score, "embedding")

    def default(self) -> RouteDecision:
        return self.decide(self.config.fallback_intent, 0.0, "default")
