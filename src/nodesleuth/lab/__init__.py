"""The lab: reproduce the incident's parts for real on this machine (and build fixture trees)."""
