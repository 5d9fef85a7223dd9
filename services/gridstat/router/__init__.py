"""The status router: routing tables, event channels and the forwarding process.

Layer: runtime (the README's layout table; ``.importlinter`` keeps it from importing any tool).
"""
