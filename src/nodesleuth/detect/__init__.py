"""Detectors: turn collected ticks into findings with evidence and a remediation."""
