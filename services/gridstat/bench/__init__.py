"""Benchmarks of the GridStat data plane (``gridstat bench``)."""
