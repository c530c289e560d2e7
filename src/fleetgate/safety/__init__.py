"""Guardrails: input / stream / output / audit checks, streaming moderation.

Red-team evaluation is tooling: ``fleetgate_training.safety`` (``training/`` in the repository).

Wiring in a few lines::

    metrics = SafetyMetrics(registry)
    checks = builtin_registry(http=resources.http)                 # the owner's session
    guardrails = Guardrails(settings.safety, registry=checks, metrics=metrics)  # no I/O
    await guardrails.warm_up()                                     # lifespan startup (optional)
    policy = guardrails.policy_for(alias=alias, team=principal.team)
    decision = await policy.run(CheckPoint.INPUT, text, CheckContext(key_id=key_id))
    decision.raise_if_blocked()
    moderator = policy.stream_moderator(ctx)                       # per streamed reply
    audit = AuditQueue([guardrails.checks["guard"]], metrics=metrics, sink=..., http=resources.http)
"""

from fleetgate.safety.audit import AuditItem, AuditQueue, AuditRecord
from fleetgate.safety.base import (
    Action,
    Check,
    CheckContext,
    CheckPoint,
    PolicyDecision,
    TextTurn,
    Verdict,
    strongest,
)
from fleetgate.safety.config import (
    AuditConfig,
    CheckConfig,
    PolicyConfig,
    SafetyConfig,
    StreamConfig,
)
from fleetgate.safety.metrics import SafetyMetrics
from fleetgate.safety.policy import Guardrails, Policy, PolicyCheck
from fleetgate.safety.registry import CheckFactory, CheckRegistry, builtin_registry
from fleetgate.safety.stream import Release, StreamModerator

__all__ = [
    "Action",
    "AuditConfig",
    "AuditItem",
    "AuditQueue",
    "AuditRecord",
    "Check",
    "CheckConfig",
    "CheckContext",
    "CheckFactory",
    "CheckRegistry",
    "PolicyDecision",
    "Guardrails",
    "Policy",
    "PolicyCheck",
    "PolicyConfig",
    "Release",
    "SafetyConfig",
    "SafetyMetrics",
    "CheckPoint",
    "StreamConfig",
    "StreamModerator",
    "TextTurn",
    "Verdict",
    "builtin_registry",
    "strongest",
]
