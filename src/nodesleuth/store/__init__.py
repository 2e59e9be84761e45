"""Embedded time-series store: append-only, checksummed, zstd-compressed segments in one directory."""
