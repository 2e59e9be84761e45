"""Collectors: read /proc, /sys, the kernel log and systemd under a configurable root."""
