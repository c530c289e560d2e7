"""Alembic revisions of the Responses API's stored responses (0010);
the folder `ResponsesFeature` names in `migrations`
(collected by ``fleetgate.app.MIGRATIONS``).
"""
