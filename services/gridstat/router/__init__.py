"""The status router: routing tables, event channels and the forwarding process."""
