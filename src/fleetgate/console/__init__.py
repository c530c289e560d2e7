"""The web console at ``/ui``: server-rendered pages over the admin services, and sign-in."""

from fleetgate.console.feature import ConsoleFeature

__all__ = ["ConsoleFeature"]
