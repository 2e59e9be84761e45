"""Remediation: the actions findings and explained incidents propose, printed and performed in one place."""
