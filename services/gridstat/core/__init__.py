"""The model, the wire format and the pure forwarding algorithms (no I/O).

Layer: runtime (the README's layout table; ``.importlinter`` keeps it from importing any tool).
"""
