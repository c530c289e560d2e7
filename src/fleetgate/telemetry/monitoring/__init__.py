"""Grafana dashboards and Prometheus alert rules, generated from the metric registries.

``catalog`` describes every metric a query may name (the gateway's registry, the engine
simulator's vLLM-named registry, and DCGM-exporter's default GPU counters); ``promql`` reads the
metric and label names out of a query; ``dashboards`` and ``alerts`` define the four dashboard
layers and the alert rules and refuse to build a query that names an unknown metric or label.
``fleetgate monitoring export DIR`` writes them (docs/operations.md, "Dashboards and alerts").
"""
