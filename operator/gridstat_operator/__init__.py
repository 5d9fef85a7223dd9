"""The GridStat operator: Kubernetes resources in, QoS-broker calls out.

``gridstat_operator.handlers`` holds the kopf handlers (thin), ``plan`` the pure decisions they
act on, ``conditions`` the one writer of every resource's status, ``brokers`` the gRPC calls with
retries and backoff, ``installing`` the all-or-nothing execution of a subscription plan.
Run it with ``gridstat-operator`` (or ``kopf run -m gridstat_operator.handlers``).
"""
