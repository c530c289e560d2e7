"""``fleetgate serve``: run the gateway, with one or several worker processes."""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from fleetgate.app import SECTIONS, build_state, create_app
from fleetgate.cli.logs import configure as configure_logging
from fleetgate.cli.supervisor import Supervisor
from fleetgate.config.loader import load_config
from fleetgate.config.settings import Settings
from fleetgate.errors import ConfigError

__all__ = ["listen_error", "register", "run", "serve_forever", "settings_from_args"]

log = logging.getLogger("fleetgate.serve")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("serve", help="run the gateway")
    parser.add_argument("--config", type=Path, required=True, help="YAML config file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=1, help="worker processes (SO_REUSEPORT)")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--no-watch", action="store_true", help="do not reload on file change")
    parser.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        config_path=args.config,
        host=args.host,
        port=args.port,
        workers=args.workers,
        data_dir=args.data_dir,
        watch_config=not args.no_watch,
    )


def _use_uvloop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


# Collector thresholds while serving (CPython's default is (700, 10, 10)). With 64 requests in
# flight their live objects alone exceed 700, so the default ran a young collection every ~20
# requests, each promoting those still-live (soon freed) objects towards the oldest generation
# and so bringing the next full collection closer. Above the in-flight working set, young
# collections become rare; cyclic garbage is still collected every 10,000 net allocations.
_GC_THRESHOLDS = (10_000, 10, 10)


def settle_heap() -> None:
    """Collect once, freeze what start-up left alive, and raise the collector's thresholds.

    Start-up leaves well over 100,000 long-lived objects (modules, pydantic and SQLAlchemy
    classes, config tables), and every full (oldest-generation) collection walks all of them:
    measured at 64 connections, one every few seconds, 190-700 ms each on a busy 2-core box
    (the gateway's p99). Frozen objects are left out of every collection; they live for the
    process anyway (one that later becomes cyclic garbage, e.g. a reloaded config's first
    tables, is not reclaimed: a one-time cost). Everything allocated later is collected as usual.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)


async def serve_forever(
    settings: Settings,
    *,
    reuse_port: bool = False,
    on_listening: Callable[[], None] | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM, then drain: the listener closes and requests in flight get
    ``server.shutdown_grace_s`` to finish. SIGHUP reloads the config. ``on_listening`` runs
    once the app has started and the port accepts connections (``fleetgate up`` prints its
    banner there). A port that cannot be bound is a :class:`ConfigError` naming it."""
    state = build_state(settings)
    app = create_app(settings, state=state)
    server = state.tables.table.config.server
    runner = web.AppRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        keepalive_timeout=server.idle_timeout_s,
        shutdown_timeout=server.shutdown_grace_s,  # the drain after SIGTERM
    )
    await runner.setup()
    try:
        site = web.TCPSite(
            runner, settings.host, settings.port, reuse_port=reuse_port, backlog=2048
        )
        try:
            await site.start()
        except OSError as exc:
            raise ConfigError(listen_error(settings.host, settings.port, exc)) from exc
        settle_heap()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, state.tables.try_reload, "sighup")
        log.info("fleetgate listening on http://%s:%d", settings.host, settings.port)
        if on_listening is not None:
            on_listening()
        await stop.wait()
    finally:
        await runner.cleanup()


def listen_error(host: str, port: int, exc: OSError) -> str:
    """One line for a port that cannot be bound (uvloop's own message repeats the address)."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return (
        f"cannot listen on {host}:{port}: {reason} "
        "(is another gateway running there? choose another with --port)"
    )


def _worker(settings: Settings, log_level: str) -> None:
    _use_uvloop()
    configure_logging(log_level)  # a spawned process starts with no logging set up
    asyncio.run(serve_forever(settings, reuse_port=True))


def _log_level(args: argparse.Namespace) -> str:
    return str(getattr(args, "log_level", None) or "INFO")


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    config = load_config(args.config, sections=SECTIONS)  # fail fast, before any worker starts
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if settings.workers <= 1:
        _use_uvloop()
        asyncio.run(serve_forever(settings))
        return 0
    _warn_if_limits_split(settings, config.tenancy.enabled)
    worker = functools.partial(_worker, settings, _log_level(args))
    return Supervisor(worker, settings.workers).run()


def _warn_if_limits_split(settings: Settings, tenancy: bool) -> None:
    """Without Redis each worker counts its own limits: N workers admit N times each limit."""
    if tenancy and not settings.redis_url:
        log.warning(
            "%d workers without FLEETGATE_REDIS_URL: every worker keeps its own RPM, TPM, "
            "parallel and budget counters, so each limit is effectively multiplied by %d. "
            "Set FLEETGATE_REDIS_URL to share them, or run one worker.",
            settings.workers, settings.workers,
        )  # fmt: skip
