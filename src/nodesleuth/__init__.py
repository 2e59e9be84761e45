"""nodesleuth: find the hidden causes of intermittent CPU starvation on Linux nodes."""

__version__ = "0.1.0"
