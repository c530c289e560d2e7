"""Alembic revisions of the batch lane's tables (0007, 0012);
the folder `BatchesFeature` names in `migrations`
(collected by ``fleetgate.app.MIGRATIONS``).
"""
