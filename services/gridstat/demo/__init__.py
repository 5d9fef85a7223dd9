"""``gridstat up``: the embedded example utility on the real management plane (topology files, brokers,
routers and simulated clients as children, a live view)."""
