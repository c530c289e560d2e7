"""The HTTP surface: OpenAI-compatible routes, health, metrics, admin."""
