"""Faithful reimplementations of the published algorithms we compare against (not their code)."""
