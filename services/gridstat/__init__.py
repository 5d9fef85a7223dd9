"""GridStat: QoS-managed status dissemination for the electric power grid.

The package is the runtime and the tools over it (README, "Layout"; ``.importlinter`` enforces it):

* the runtime -- ``core`` (the model, the wire format, TLS, access control), ``router`` (the status
  router), ``broker`` (leaf and parent QoS brokers), ``admission`` (the admission controller),
  ``condensation`` (condensation functions), ``client`` (the publisher and subscriber SDK) and
  ``telemetry`` (Kafka export, Prometheus metrics);
* the tools over it -- ``cli`` (the ``gridstat`` command), ``demo`` (``gridstat up``), ``bench``,
  ``chaos``, ``analysis`` (the capacity model) and ``granularity`` (delay- and bandwidth-aware
  subscriptions); no runtime module imports one of them.
"""

__version__ = "0.1.0"
