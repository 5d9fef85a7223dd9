"""The history service: time-range queries of archived status variables (docs/history.md).

``gridstat history-server`` answers ``History.Query`` (protos/gridstat/v1/history.proto) from the
Kafka archive topic ``gridstat archive`` writes: ``querying`` checks a query against the server's
bounds and applies the live rate filter (dissertation 4.2.1) with the publication's own phase;
``service`` streams the answer, read by ``gridstat.telemetry.archive_reading`` (the only part that
talks to Kafka); ``main`` is the role's process. Clients use ``gridstat.client.HistoryClient``.

Layer: runtime, a role beside the router, the brokers, the admission controller and the client
(``.importlinter``): it meets them over gRPC only.
"""
