"""Built-in checks. Each registers itself in :func:`fleetgate.safety.registry.builtin_registry`."""
