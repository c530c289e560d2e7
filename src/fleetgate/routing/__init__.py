"""Routing: aliases, deployments, strategies, health, fallbacks, engine state, canaries."""
