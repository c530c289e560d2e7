"""``fleetgate epp``: run fleetgate as the endpoint picker of an Envoy-based gateway.

The gateway is built as ``fleetgate serve`` builds it (same config, same features: keys,
limits, budgets, input checks, admission, routing) and serves its HTTP side (``/metrics``,
``/health/*``, the admin API) on ``--port``; Envoy's ext_proc filter talks gRPC to
``--grpc-port``. See docs/deploy.md, "fleetgate as the endpoint picker".

Endpoints: with ``--pool-name`` (and ``--pool-namespace``), the InferencePool's ready pods,
watched through the Kubernetes API (`fleetgate.epp.pool_watch`), become the deployments of
``--pool-alias``, whose one deployment in the config is their template
(`fleetgate.epp.pool_follow`); without it, the deployments written in the config (off
Kubernetes, or engines outside the cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from fleetgate.app import SECTIONS, build_state, create_app
from fleetgate.cli.serve import _use_uvloop, listen_error, settle_heap
from fleetgate.config.loader import load_config
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.errors import ConfigError
from fleetgate.extras import require

if TYPE_CHECKING:
    from fleetgate.api.state import GatewayState
    from fleetgate.epp.pool_watch import PoolWatch

__all__ = ["register", "run"]

log = logging.getLogger("fleetgate.epp")

_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "epp", help="run as the endpoint picker (Envoy ext_proc) of an inference gateway"
    )
    parser.add_argument("--config", type=Path, required=True, help="YAML config file")
    parser.add_argument("--host", default="127.0.0.1", help="address of both listeners")
    parser.add_argument("--port", type=int, default=4000, help="HTTP: metrics, health, admin")
    parser.add_argument("--grpc-port", type=int, default=9002, help="ext_proc and gRPC health")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument(
        "--response-body",
        choices=("streamed", "none", "observed"),
        default="streamed",
        help="what Envoy's response_body_mode sends: streamed (billed from usage), none "
        "(header-only: output billed at max_tokens) or observed (to a second ext_proc filter "
        "in observability mode, billed from usage; the usage event stays in the stream)",
    )
    parser.add_argument(
        "--fallbacks", type=int, default=0, help="endpoints listed after the pick for retries"
    )
    parser.add_argument(
        "--header-only-output-tokens",
        type=int,
        default=256,
        help="with --response-body none: output tokens billed for a request without max_tokens",
    )
    parser.add_argument(
        "--lease-key",
        default=None,
        help="Redis key of the leader lease between replicas (needs FLEETGATE_REDIS_URL); "
        "only the leader is ready",
    )
    parser.add_argument("--lease-ttl", type=float, default=10.0, help="lease seconds")
    parser.add_argument(
        "--wake-hold-s",
        type=float,
        default=8.0,
        help="the longest a pick waits for a pool with wake: (asleep or scaled to zero), the "
        "wake-up included, before answering 503; a waiting pick asks Envoy for this + 2 s more "
        "(set the ext_proc filter's max_message_timeout at least that high)",
    )
    parser.add_argument("--no-watch", action="store_true", help="do not reload on file change")
    parser.add_argument(
        "--pool-name",
        default=None,
        help="the InferencePool whose ready pods are the endpoints (watched through the "
        "Kubernetes API; needs the kube extra); without it, the config's deployments",
    )
    parser.add_argument(
        "--pool-namespace",
        default=None,
        help="the InferencePool's namespace (default: the picker pod's own, else 'default')",
    )
    parser.add_argument(
        "--pool-alias",
        default=None,
        help="the alias the pool serves: its one deployment in the config is the template of "
        "each pod's (default: the config's only alias)",
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="a kubeconfig file for --pool-name (default: in-cluster, else $KUBECONFIG)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    require("grpc", extra="epp", purpose="the endpoint picker")
    require("envoy.service.ext_proc.v3", extra="epp", purpose="the endpoint picker")
    settings = Settings.from_env(
        config_path=args.config,
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        watch_config=not args.no_watch,
    )
    config = load_config(args.config, sections=SECTIONS)  # fail fast on a bad config
    if args.pool_name:
        require("kubernetes", extra="kube", purpose="watching the InferencePool's pods")
        args.pool_alias = _pool_alias(config, args.pool_alias)
        args.pool_namespace = args.pool_namespace or _own_namespace()
    elif args.pool_alias or args.pool_namespace:
        raise ConfigError("--pool-alias and --pool-namespace need --pool-name")
    if not 0 < args.wake_hold_s <= 300:
        raise ConfigError("--wake-hold-s must be above 0 and at most 300 seconds")
    if args.lease_key and not settings.redis_url:
        raise ConfigError("--lease-key needs FLEETGATE_REDIS_URL: the lease lives in Redis")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    _use_uvloop()
    asyncio.run(_serve(settings, args))
    return 0


def _pool_alias(config: GatewayConfig, alias: str | None) -> str:
    from fleetgate.epp.pool_follow import template_of

    if alias is None:
        if len(config.models) != 1:
            raise ConfigError("--pool-name: say which alias the pool serves (--pool-alias)")
        alias = config.models[0].alias
    template_of(config, alias)
    return alias


def _own_namespace() -> str:
    try:
        return _NAMESPACE_FILE.read_text().strip() or "default"
    except OSError:
        return "default"


async def _serve(settings: Settings, args: argparse.Namespace) -> None:
    from fleetgate.epp.exchange import EppOptions
    from fleetgate.epp.lease import LeaderLease
    from fleetgate.epp.server import EppServer

    state = build_state(settings)
    pool = _pool_watch(state, args)  # before the app starts: the template never serves
    app = create_app(settings, state=state)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    epp: EppServer | None = None
    try:
        site = web.TCPSite(runner, settings.host, settings.port)
        try:
            await site.start()
        except OSError as exc:
            raise ConfigError(listen_error(settings.host, settings.port, exc)) from exc
        options = EppOptions(
            response_body=args.response_body,
            fallbacks=args.fallbacks,
            header_only_output_tokens=args.header_only_output_tokens,
            wake_hold_s=args.wake_hold_s,
        )
        lease = None
        if args.lease_key:
            redis = state.resources.redis.client(settings.redis_url or "")
            key, ttl = args.lease_key, args.lease_ttl

            def lease(on_change: Any) -> LeaderLease:
                return LeaderLease(redis, key, ttl_s=ttl, on_change=on_change)

        synced = None
        if pool is not None:
            await pool.start()
            synced = pool.is_synced
        epp = EppServer(state, options, host=settings.host, port=args.grpc_port, lease=lease,
                        endpoints_synced=synced)  # fmt: skip
        port = await epp.start()
        settle_heap()
        log.info("fleetgate epp: ext_proc on %s:%d, http on %s:%d",
                 settings.host, port, settings.host, settings.port)  # fmt: skip
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        if epp is not None:
            await epp.aclose()
        if pool is not None:
            await pool.aclose()
        await runner.cleanup()


def _pool_watch(state: GatewayState, args: argparse.Namespace) -> PoolWatch | None:
    """With ``--pool-name``: the watch of the pool's pods, feeding the alias's deployments."""
    if not args.pool_name:
        return None
    from fleetgate.epp.pool_api import PoolApi, api_client
    from fleetgate.epp.pool_follow import PoolFollower
    from fleetgate.epp.pool_watch import PoolWatch

    follower = PoolFollower(state.tables, args.pool_alias)
    api = PoolApi(api_client(args.kubeconfig), args.pool_namespace, args.pool_name)
    return PoolWatch(api, follower.update)
