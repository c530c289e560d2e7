"""Releases: the model registry (versions and stage aliases), evaluation runs attached to
versions, and quality gates on promotion. See ``docs/releases.md``."""
