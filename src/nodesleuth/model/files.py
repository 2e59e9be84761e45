"""Names of the files nodesleuth keeps on a node, in one place: the writer and every reader that must
recognise them (the store refuses a directory holding anything else) import them from here."""

PROBE_STATE_FILE = "probes.json"  # the probes' once-a-boot results (collect/probe_state.py), under --state-dir
