"""Alembic revisions of the insights tables (0015);
the folder `InsightsFeature` names in `migrations`
(collected by ``fleetgate.app.MIGRATIONS``).
"""
