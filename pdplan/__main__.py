"""``python -m pdplan`` runs the command line."""

from pdplan.entry import main

main()
