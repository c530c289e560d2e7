"""Alembic revisions of tenancy's tables (0001, 0002, 0003, 0009, 0011, 0013);
the folder `TenancyFeature` names in `migrations`
(collected by ``fleetgate.app.MIGRATIONS``).
"""
