"""Engine launchers: start, health-check, scale and stop the engines that serve one registered
version (`Launcher`), on this machine (`LocalLauncher`) or on Kubernetes (`KubeLauncher`)."""

from fleetgate.releases.launchers.base import Engines, Launcher, Record, ServeSpec, serve_spec
from fleetgate.releases.launchers.kube import KubeLauncher, render_objects
from fleetgate.releases.launchers.local import LocalLauncher

__all__ = [
    "Engines",
    "KubeLauncher",
    "Launcher",
    "LocalLauncher",
    "Record",
    "ServeSpec",
    "render_objects",
    "serve_spec",
]
