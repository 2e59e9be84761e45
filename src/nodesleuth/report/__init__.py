"""Reports: terminal text and JSON renderings of findings."""
