"""kopf handlers of the GridStat operator: ``kopf run -m gridstat_operator.handlers``.

One module per kind (``subscriptions``, ``modes``, ``activemodes``, ``condensations``), plus
``operating`` for start-up settings (peering, persistence, probes). Handlers are named
``<kind>_<event>``, stay thin, and leave decisions to ``gridstat_operator.plan``.
"""

from gridstat_operator.handlers import activemodes, condensations, modes, operating, subscriptions

__all__ = ["activemodes", "condensations", "modes", "operating", "subscriptions"]
