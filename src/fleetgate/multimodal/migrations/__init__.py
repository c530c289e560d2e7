"""Alembic revisions of the multimodal pipeline's conversation tables (0004);
the folder `MultimodalFeature` names in `migrations`
(collected by ``fleetgate.app.MIGRATIONS``).
"""
