"""`python -m cli` runs the `berth` command."""

from cli.main import main

main()
