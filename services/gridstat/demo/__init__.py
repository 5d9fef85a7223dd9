"""``gridstat up``: the embedded example utility (topology files, a static route planner, a live view)."""
