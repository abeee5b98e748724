"""fabricmon scale benchmarks (``python -m bench``); figures, not tests."""
