from .cli import main

main(prog_name="nodesleuth")  # `python -m nodesleuth` speaks as the installed command does (usage, --version)
