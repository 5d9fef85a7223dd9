"""Gateways between GridStat and the synchrophasor protocols of the power grid (runtime).

A wire protocol gets python-zeroconf's three rooms: a sans-I/O codec (bytes in, typed frames out, no
sockets and no clock), handlers that decide what to do with the frames, and a thin transport. So far
there is the codec of IEEE C37.118.2-2011, ``gridstat.gateways.c37118`` (docs/c37118.md).

Layer: runtime (the README's layout table; ``.importlinter`` keeps it from importing any tool).
"""
