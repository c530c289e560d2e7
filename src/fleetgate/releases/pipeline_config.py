"""The ``pipelines:`` config section: which registry models run the release pipeline by
themselves, with which suites, and how far it goes.

Example (YAML)::

    pipelines:
      launcher: local                 # or kubernetes
      models:
        chat:
          alias: chat                 # follows the model's production stage
          suites: [evals/golden.jsonl, evals/red-team.jsonl]
          drift_suites: [evals/long.jsonl]   # 2k+ token outputs judged against the parent
          release: rollout            # gate: stop after the gate; rollout: release on a pass
          steps: [10, 50, 100]
          keep: 3                     # production versions whose engines stay launched
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fleetgate.config.sections import Section

__all__ = ["PIPELINES_SECTION", "ModelPipeline", "PipelinesConfig"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelPipeline(_Model):
    """The pipeline of one registry model."""

    # the alias that follows the model's production stage: suites reach `<alias>@<version>`
    alias: str = Field(min_length=1, max_length=200)
    # JSONL suites (docs/releases.md) run on the candidate through the gateway
    suites: tuple[str, ...] = ()
    # long-generation suites whose outputs are compared with the parent's (else production's)
    # word by word: metrics drift_agreement and drift_diverged
    drift_suites: tuple[str, ...] = ()
    # start a run for each version registered (else only `POST /admin/pipelines`)
    auto: bool = True
    # gate: stop after the gate; rollout: on a pass, launch production engines and roll out
    release: Literal["gate", "rollout"] = "gate"
    # production engines launched for a released version
    replicas: int = Field(1, ge=1, le=64)
    # how many production versions keep their engines launched after a promotion (the newest
    # first); older ones are stopped
    keep: int = Field(3, ge=1, le=20)
    # replicas each kept previous version is scaled to
    keep_replicas: int = Field(1, ge=1, le=64)
    # the rollout's traffic steps (percent of the alias's requests to the candidate)
    steps: tuple[float, ...] = (10.0, 50.0, 100.0)
    # how long each step is observed before it is judged
    interval_s: float = Field(10.0, gt=0, le=86400)
    # requests each side needs before a step is judged
    min_samples: int = Field(20, ge=1)
    # suite items in flight at once
    concurrency: int = Field(8, ge=1, le=256)


class PipelinesConfig(_Model):
    """How release pipelines run (docs/releases.md#the-release-pipeline)."""

    # local: engines as processes on this machine; kubernetes: a Deployment + Service each
    launcher: Literal["local", "kubernetes"] = "local"
    # how often each replica looks at running pipelines (and renews its leases)
    tick_s: float = Field(1.0, gt=0, le=60)
    # how long a replica's lease on driving a run lasts without renewal
    lease_s: float = Field(10.0, gt=0, le=600)
    # the most an engine may take to answer its health check once started
    start_timeout_s: float = Field(300.0, gt=0, le=7200)
    # local launcher: where engine logs go (default: <data dir>/engines)
    log_dir: str | None = None
    # kubernetes launcher: the engine base manifests (deployment.yaml, service.yaml)
    kube_base_dir: str = "deploy/kubernetes/engines/base"
    # kubernetes launcher: the namespace of the engines' Deployments and Services
    kube_namespace: str = "default"
    # kubernetes launcher: the image that runs simulator builds (`fleetgate sim`)
    fleetgate_image: str = "ghcr.io/fleetgate/fleetgate:latest"
    # versions registered at most this long ago without a run get one (auto models)
    auto_window_s: float = Field(86400.0, gt=0)
    # the gateway suites go through (default: this replica's own address)
    gateway_url: str | None = None
    # the pipeline of each registry model, by model name
    models: dict[str, ModelPipeline] = Field(default_factory=dict)


PIPELINES_SECTION = Section(
    "pipelines",
    PipelinesConfig,
    # read on each tick (ReleasesFeature.reconfigure); the launcher is chosen at start
    reload={
        "": "live",
        "launcher": "restart",
        "log_dir": "restart",
        "kube_base_dir": "restart",
        "kube_namespace": "restart",
        "fleetgate_image": "restart",
    },
)
"""The ``pipelines`` section: release pipelines by registry model."""
