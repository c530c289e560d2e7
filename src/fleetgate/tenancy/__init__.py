"""Tenancy: principals and authentication (teams, keys, budgets and spend build on these)."""

from fleetgate.tenancy.auth import Authenticator, MasterKeyAuthenticator, bearer_token
from fleetgate.tenancy.principal import Principal

__all__ = ["Authenticator", "MasterKeyAuthenticator", "Principal", "bearer_token"]
