"""Benchmarks of the GridStat data plane (``gridstat bench``).

Layer: a tool over the runtime, shipped with it (the README's layout table; ``.importlinter``).
"""
