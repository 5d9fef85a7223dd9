"""The ``gridstat`` command."""
