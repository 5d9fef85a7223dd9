"""Delay- and bandwidth-aware subscription granularity and the relay overlay (seed 004).

``space`` (attribute space of status variables, user-level rectangles), ``dz`` (dz-expressions:
encode, cover, coarsen, refine, wildcards), ``accuracy`` (bandwidth budgets ``B/(m+1)``, rate
models, Algorithm 2's coarsening and refining), ``overlay`` (Algorithm 1 as pure message
handlers), ``triggers`` (Algorithm 2's BandwidthViolated: measured ``R(s)`` against
``B(s)/(m+1)``), ``simulating`` (round-based simulation of both algorithms), ``serving`` (which
subscriptions take the overlay, relay plans) and ``relays`` (UDP relay peers forwarding
GridStat datagrams, and the timer that raises BandwidthViolated on them). Hard-guaranteed
subscriptions never use any of it: they stay on router paths. See ``docs/granularity.md``.

Layer: a tool over the runtime, shipped with it (the README's layout table; ``.importlinter``).
"""
