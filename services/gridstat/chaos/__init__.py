"""The chaos suite shipped with the product (docs/chaos.md): real processes on 127.0.0.1, real faults.

``gridstat chaos list`` names the scenarios; ``gridstat chaos run SCENARIO`` starts routers, a leaf
broker (and an admission controller, a parent broker over two clouds or a standalone condensation
host where needed) as child processes, drives traffic through them,
injects the scenario's fault (kill -9, SIGSTOP/SIGCONT, restart at the same ports, an impaired
event channel) and prints a table of invariants, each with what was expected and what was seen.
Every loop is bounded in count and time; every child is reaped.

Layer: a tool over the runtime, shipped with it (the README's layout table; ``.importlinter``).
"""
