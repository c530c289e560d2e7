"""Scheduling: saturation detection, admission queues by band and fair share, shedding."""
