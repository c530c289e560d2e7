"""The `Launcher` interface and how a registry entry says what to run (`serve_spec`).

A version's serve command comes from its registry entry:

- ``card.serve`` (a list of arguments, or a string split like a shell line), e.g.
  ``["fleetgate", "sim", "--mode", "echo"]`` or ``"vllm serve /models/chat-7 --dtype half"``;
- else an ``artifact_uri`` of the form ``sim://NAME``: the simulator serving NAME;
- else ``vllm serve <artifact_uri>`` with the entry's tokenizer, tensor parallelism, maximum
  length and quantization.

The served model name is the first deployment's ``model``; the launcher adds the host and port.

Example::

    spec = serve_spec(version)          # version: a registry version as a dict
    engines = await launcher.start(version, role="eval")
    assert await launcher.healthy(engines)
    await launcher.stop(engines)
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from fleetgate.errors import InvalidRequest

__all__ = ["Engines", "Launcher", "Record", "ServeSpec", "serve_spec"]


@dataclass(frozen=True)
class ServeSpec:
    """What runs one engine of a version: ``argv`` without host and port, the engine's kind
    (``vllm`` or ``sim``: how host, port and model name are passed) and its served name."""

    kind: str
    argv: list[str]
    served_model: str

    def with_address(self, host: str, port: int) -> list[str]:
        """The full command line of one engine listening on ``host:port``."""
        name_flag = "--model" if self.kind == "sim" else "--served-model-name"
        return [*self.argv, name_flag, self.served_model, "--host", host, "--port", str(port)]


@dataclass(frozen=True)
class Engines:
    """The engines of one version in one role (``eval``: the pipeline's temporary instance,
    ``production``): where they answer and what the launcher needs to find them again."""

    model: str
    version: str
    role: str
    urls: list[str]
    replicas: int
    detail: dict[str, Any] = field(default_factory=dict)  # pids, ports, object names

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Engines:
        return cls(
            str(data["model"]), str(data["version"]), str(data["role"]),
            [str(u) for u in data["urls"]], int(data["replicas"]), dict(data.get("detail") or {}),
        )  # fmt: skip


Record = Callable[["Engines"], Awaitable[None]]
"""Stores what a launcher is about to start or has started, durably (the pipeline writes it to
its run's row). A launcher calls it *before* each engine is started (the launch's intent: its
port and a token the process carries), again once the process exists (its pid), so whatever
dies in between, a later `Launcher.resume` can find the engine and adopt or stop it. An error
it raises stops the launch before anything more is started."""


class Launcher(Protocol):
    """Starts, checks, scales and stops the engines serving one registered version."""

    async def start(
        self,
        version: Mapping[str, Any],
        *,
        role: str,
        replicas: int = 1,
        record: Record | None = None,
    ) -> Engines:
        """Start ``replicas`` engines and wait (bounded) until they answer their health check;
        raise `fleetgate.errors.UpstreamError` if they do not (nothing is left running).
        ``record`` is told of each launch before it starts (`Record`)."""
        ...

    async def resume(
        self,
        version: Mapping[str, Any],
        engines: Engines,
        *,
        replicas: int,
        record: Record | None = None,
    ) -> Engines:
        """Finish a start that was interrupted (the process that called `start` died): the
        engines ``record`` last stored are found again; each still starting is waited for and
        adopted (unhealthy ones stopped), the missing ones started, up to ``replicas``."""
        ...

    async def healthy(self, engines: Engines) -> bool:
        """Whether every engine answers its health check now."""
        ...

    async def scale(
        self, engines: Engines, replicas: int, *, record: Record | None = None
    ) -> Engines:
        """The same engines with ``replicas`` of them (started or stopped to match); launches
        an interrupted scale left are adopted or stopped first, new ones told to ``record``."""
        ...

    async def stop(self, engines: Engines) -> None:
        """Stop them, those recorded as still starting included (idempotent: engines already
        gone are not an error)."""
        ...


def _served_model(version: Mapping[str, Any]) -> str:
    deployments = version.get("deployments") or []
    if deployments and isinstance(deployments[0], Mapping) and deployments[0].get("model"):
        return str(deployments[0]["model"])
    return f"{version['model']}-{version['version']}"


def serve_spec(version: Mapping[str, Any]) -> ServeSpec:
    """How to run one engine of the registry ``version`` (module docstring)."""
    served = _served_model(version)
    card = version.get("card")
    serve = card.get("serve") if isinstance(card, Mapping) else None
    if serve is not None:
        argv = shlex.split(serve) if isinstance(serve, str) else [str(a) for a in serve]
        if not argv:
            raise InvalidRequest("card.serve is empty", param="card")
        kind = "sim" if argv[:2] == ["fleetgate", "sim"] else "vllm"
        return ServeSpec(kind, argv, served)
    uri = str(version.get("artifact_uri") or "")
    if uri.startswith("sim://"):
        return ServeSpec("sim", ["fleetgate", "sim", "--mode", "echo"], served)
    if not uri:
        raise InvalidRequest("the version has no artifact_uri and no card.serve", param="card")
    argv = ["vllm", "serve", uri]
    options = (
        ("tokenizer", "--tokenizer"), ("tensor_parallel", "--tensor-parallel-size"),
        ("max_model_len", "--max-model-len"), ("quantization", "--quantization"),
    )  # fmt: skip
    for key, flag in options:
        if version.get(key) not in (None, ""):
            argv += [flag, str(version[key])]
    return ServeSpec("vllm", argv, served)
