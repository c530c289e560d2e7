"""The ``fleetgate`` command: one module per sub-command."""
