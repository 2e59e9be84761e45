"""The web view: a timeline of every CPU, FlameScope-style drill-down, flame graphs, incidents."""
