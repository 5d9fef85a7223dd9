"""The leaf QoS broker's pure algorithm layer (dissertation 2.1.1-2.1.2, 3.3.1; docs/management-plane.md).

A leaf QoS broker owns one cloud: it knows every status router's capacity and
every event channel's bandwidth and latency, and admits a subscription only if it
can pre-allocate paths that keep the subscription's QoS given what is already
reserved. The modules below are that decision and nothing else: no gRPC, no I/O,
no clocks, so it can be tested exhaustively and benchmarked on its own.

* :mod:`.topology` - routers and directed event channels of one cloud;
* :mod:`.paths` - latency-shortest path and k node-disjoint paths (Suurballe/Bhandari);
* :mod:`.rates` - the rate after filtering of a set of subscription intervals, exactly;
* :mod:`.resources` - reservation bookkeeping by that rate;
* :mod:`.allocation` - ``plan_subscription`` / ``commit`` / ``release``;
* :mod:`.rejections` - machine-readable rejections with what the broker could offer instead;
* :mod:`.generate` - seeded random clouds and the admission benchmark.

The brokers that run it are front objects over parts that own their state: :mod:`.leaf` over
one :mod:`.cloud` and its parts (:mod:`.admitting`, :mod:`.modes`, :mod:`.flooding`,
:mod:`.condensing`, :mod:`.segments`), served by :mod:`.service`; :mod:`.parent_service` above
the leaves (docs/management-plane.md, "Inside a broker").

Layer: runtime (the README's layout table; ``.importlinter`` keeps it from importing any tool).
"""
