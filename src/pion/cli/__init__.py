"""Command-line entry points: ``pion-server`` and ``pion``. Builds Settings; nothing imports cli."""
