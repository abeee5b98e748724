"""Grafana dashboards, Prometheus rules and provisioning for fabricmon (built by dashboards/build.py)."""
