"""The lab's actors: real programs, each run as its own process with a telling name (comm)."""
