"""``python -m onlooker``: the command line, as the ``onlooker`` script runs it."""

from onlooker._cli import main

main()
