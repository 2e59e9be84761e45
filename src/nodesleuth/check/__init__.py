"""`nodesleuth check`, the application: samples the node for a few seconds (collect/), traces cgroup churn, reads
the probes' results, hands one Window to the detectors (detect/, pure rules over data) and assembles the result and
its JSON."""
