"""``fleetgate up``'s own engines never take a port the user was told about."""

from __future__ import annotations

from pathlib import Path

from tests.procs import free_port

from fleetgate.cli.up import _start_engines, _stop


def test_the_engines_skip_the_gateway_and_flaky_ports(tmp_path: Path) -> None:
    # The README tour's ports: the first engine's, then the flaky engine's right after it (the
    # second engine took the next port, so the user's flaky engine could not start there and
    # every "flaky" request went to a healthy simulator: no retry was ever counted).
    first = free_port()
    gateway, flaky = first + 1, first + 2
    procs, urls = _start_engines(first, tmp_path, (gateway, flaky))
    try:
        ports = [int(url.removesuffix("/v1").rsplit(":", 1)[1]) for url in urls.values()]
        assert ports[0] == first
        assert len(set(ports)) == len(ports)
        assert not {gateway, flaky} & set(ports), ports
    finally:
        _stop(procs)
