"""``gridstat up``: the embedded example utility on the real management plane (topology files, brokers,
routers and simulated clients as children, a live view).

Layer: a tool over the runtime, shipped with it (the README's layout table; ``.importlinter``).
"""
