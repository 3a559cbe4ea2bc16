"""``python -m pdplan`` runs the command line."""

from pdplan.cli import main

main()
