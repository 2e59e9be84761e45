"""nodesleuth: find the hidden causes of intermittent CPU starvation on Linux nodes."""

__version__ = "0.2.0"
