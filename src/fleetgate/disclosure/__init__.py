"""Regulatory disclosure: the serving model's registered name and filing number on every answer."""
