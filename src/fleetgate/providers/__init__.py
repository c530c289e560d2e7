"""Providers: one module per upstream family, all speaking OpenAI format to the gateway."""
