"""The platform's team quotas and priority bands as Kueue objects: what Kubernetes' own
scheduler admits on GPUs, next to what the gateway admits on requests.

The gateway schedules *requests* into engine slots (`fleetgate.scheduling`): bands, quotas in
requests in flight, fair shares. Kueue schedules *GPUs* to workloads: engines, evaluation
instances, training jobs. Both follow one config: each team with a concurrency quota in
``scheduling.teams`` becomes a ClusterQueue whose GPU quota is its request quota times
``scheduling.kueue.gpus_per_slot`` (the GPUs one engine slot stands for: an engine of 1 GPU
running ``max_num_seqs: 64`` is 1/64), in the Cohort of its org (``scheduling.orgs``, whose
quota bounds the org's teams together), with a LocalQueue in the team's namespace. Three
WorkloadPriorityClasses order the workloads: production inference over evaluation over
experimental training, and the queues' preemption lets production inference reclaim GPUs,
within its queue and from borrowers in its cohort, from anything of lower priority.

Rendered by ``fleetgate kube kueue --config fleetgate.yaml`` (``kueue.x-k8s.io/v1beta2``),
validated against Kueue's published CRD schemas in the tests.
"""

from __future__ import annotations

import math
import re
from typing import Any

from fleetgate.scheduling.config import ConcurrencyQuota, KueueConfig, SchedulingConfig

__all__ = ["API", "PRIORITIES", "KueueConfig", "engine_labels", "render"]

API = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"
PRIORITIES = ("production-inference", "evaluation", "experimental-training")
"""The WorkloadPriorityClasses, highest first."""
_DNS = re.compile(r"[^a-z0-9-]+")


def _name(value: str) -> str:
    """A DNS-1123 label from a team or org id."""
    name = _DNS.sub("-", value.lower()).strip("-")[:63].strip("-")
    if not name:
        raise ValueError(f"{value!r} gives no Kubernetes name")
    return name


def _gpus(slots: int | None, per_slot: float) -> int | None:
    return None if slots is None else math.ceil(slots * per_slot - 1e-9)


def _resources(quota: ConcurrencyQuota, per_slot: float, flavor: str) -> list[dict[str, Any]]:
    resource: dict[str, Any] = {"name": GPU, "nominalQuota": _gpus(quota.nominal, per_slot)}
    if quota.borrowing_limit is not None:
        resource["borrowingLimit"] = _gpus(quota.borrowing_limit, per_slot)
    if quota.lending_limit is not None:
        resource["lendingLimit"] = _gpus(quota.lending_limit, per_slot)
    return [{"coveredResources": [GPU], "flavors": [{"name": flavor, "resources": [resource]}]}]


def engine_labels(team: str, priority: str = PRIORITIES[0]) -> dict[str, str]:
    """The pod labels that put an engine (or a pipeline's instance) in ``team``'s queue."""
    if priority not in PRIORITIES:
        raise ValueError(f"priority: one of {', '.join(PRIORITIES)}")
    return {"kueue.x-k8s.io/queue-name": _name(team), "kueue.x-k8s.io/priority-class": priority}


def render(config: SchedulingConfig, kueue: KueueConfig) -> list[dict[str, Any]]:
    """The objects, in apply order: ResourceFlavor, priority classes, Cohorts, ClusterQueues,
    LocalQueues. Teams without a concurrency quota get a queue with nominal 0 (they only
    borrow); orgs without one bound nothing (a Cohort with no resource groups)."""
    flavor = _name(kueue.flavor)
    objects: list[dict[str, Any]] = [{
        "apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": flavor},
        "spec": {"nodeLabels": dict(kueue.flavor_node_labels)} if kueue.flavor_node_labels else {},
    }]  # fmt: skip
    descriptions = ("production inference: engines serving traffic",
                    "evaluation: release pipelines' temporary instances and suites",
                    "experimental training: first to give GPUs back")  # fmt: skip
    for name, value, text in zip(PRIORITIES, kueue.priorities, descriptions, strict=True):
        objects.append(
            {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": name},
             "value": value, "description": text}
        )  # fmt: skip
    if any(policy.org is None for policy in config.teams.values()):
        objects.append({"apiVersion": API, "kind": "Cohort", "metadata": {"name": "fleetgate"},
                        "spec": {}})  # fmt: skip  # the teams of no org
    for org, org_policy in sorted(config.orgs.items()):
        spec: dict[str, Any] = {}
        if org_policy.quota.concurrency is not None:
            spec["resourceGroups"] = _resources(org_policy.quota.concurrency,
                                                kueue.gpus_per_slot, flavor)  # fmt: skip
        objects.append({"apiVersion": API, "kind": "Cohort", "metadata": {"name": _name(org)},
                        "spec": spec})  # fmt: skip
    training = kueue.priorities[2]
    for team, policy in sorted(config.teams.items()):
        quota = policy.quota.concurrency if policy.quota else None
        queue = _name(team)
        spec = {
            "cohortName": _name(policy.org) if policy.org else "fleetgate",
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": _resources(quota or ConcurrencyQuota(nominal=0),
                                         kueue.gpus_per_slot, flavor),  # fmt: skip
            "preemption": {
                # a team under its nominal quota takes it back from borrowers in its cohort
                "reclaimWithinCohort": "Any",
                # within the team's own queue, higher priority first
                "withinClusterQueue": "LowerPriority",
                # borrowing, it may preempt only experimental training elsewhere
                "borrowWithinCohort": {"policy": "LowerPriority",
                                       "maxPriorityThreshold": training},
            },
        }  # fmt: skip
        objects.append({"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": queue},
                        "spec": spec})  # fmt: skip
        namespace = kueue.namespaces.get(team, queue)
        objects.append({"apiVersion": API, "kind": "LocalQueue",
                        "metadata": {"name": queue, "namespace": namespace},
                        "spec": {"clusterQueue": queue}})  # fmt: skip
    return objects
