"""The ``gridstat`` command.

Layer: a tool over the runtime, shipped with it (the README's layout table; ``.importlinter``).
"""
