"""The model, the wire format and the pure forwarding algorithms (no I/O)."""
