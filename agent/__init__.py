"""fabricmon agent: scheduler, counter store, detector, exporter, CLI."""

__version__ = "0.1.0"
