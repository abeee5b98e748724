"""The ground floor: the contract collectors and agent share, importing nothing above it.

Installed as ``fabricmon.core`` (``pyproject.toml`` maps it from ``agent/core/``): the data
types a parser produces (``model``), the internal counter vocabulary (``vocabulary``), secret
references (``secrets``), the cabling graph (``topology``) and the one duration type of every
config option (``durations``). ``fabricmon.collectors`` imports
only this package from outside itself; ``fabricmon.agent`` imports collectors only through the
registry (``fabricmon.collectors.get``).
"""
