"""Thin command line over the packages: one module per command group, options and calls only;
every command turns InputError into one line and exit 2 (cli/common.py)."""

from __future__ import annotations

import click

from .common import StableGroup


@click.group(cls=StableGroup)
@click.version_option(package_name="nodesleuth")
def main() -> None:
    """Find the hidden causes of intermittent CPU starvation on Linux nodes, with evidence."""


from . import check, cut, explain, fleet, lab, profile, record  # noqa: E402,F401  (they register their commands)

if __name__ == "__main__":
    main()
