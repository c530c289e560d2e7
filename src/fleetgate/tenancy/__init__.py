"""Tenancy: teams, keys, users, budgets and spend, built on `fleetgate.contract.principal`."""
