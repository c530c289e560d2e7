"""Alembic revisions of the releases feature's tables (0006, 0008, 0014);
the folder `ReleasesFeature` names in `migrations`
(collected by ``fleetgate.app.MIGRATIONS``).
"""
