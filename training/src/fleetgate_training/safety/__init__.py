"""Red-team evaluation of guardrails (`evaluate`) and its command (`cli`)."""

from fleetgate_training.safety.evaluate import (
    EvalReport,
    blocked_by,
    evaluate,
    load_prompts,
    shipped_set,
)

__all__ = ["EvalReport", "blocked_by", "evaluate", "load_prompts", "shipped_set"]
