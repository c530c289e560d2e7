"""Tenancy: teams, keys, users, budgets and spend, built on `fleetgate.contract.principal`."""

from fleetgate.tenancy.auth import MasterKeyAuthenticator

__all__ = ["MasterKeyAuthenticator"]
