"""Insights: end users, sessions and plans recorded per request; business metrics (DAU/MAU,
retention, conversion, cost against revenue) and the key hygiene report (`docs/insights.md`)."""
