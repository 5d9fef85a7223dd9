"""Operator-wide settings, set once at start-up, with the reason beside each."""

from __future__ import annotations

import logging
import os
import random
from typing import Any

import kopf

from gridstat_operator import brokers as brokering
from gridstat_operator import config as configs
from gridstat_operator import resources
from gridstat_operator.handlers import common


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """The kubeconfig (``KUBECONFIG`` or ``~/.kube/config``), else, in a pod, the service account.

    Looked up when the operator starts. kopf's own fallbacks are chosen when the handlers are first
    imported, and a process that imported them before ``KUBECONFIG`` was set (a test run, an embedding
    application) would otherwise find no credentials at all."""
    info: kopf.ConnectionInfo | None = kopf.login_with_kubeconfig(**kwargs) or \
        kopf.login_with_service_account(**kwargs)
    return info


@kopf.on.startup()
async def operator_startup(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """When the operator starts: persistence under our own names, peering, timeouts, the brokers."""
    # Progress and the diff base live in annotations: the CRDs' status schemas are structural,
    # so kopf's default `status.kopf` would be pruned by the API server.
    settings.persistence.finalizer = resources.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=resources.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=resources.GROUP, key="last-handled-configuration")
    # Events only from explicit kopf.info/warn calls: one per decision, not one per log line.
    settings.posting.loggers = False
    settings.posting.level = logging.INFO
    # The periodic checks (timers) log at DEBUG unless they change something (common.report_change).
    common.quiet_periodic_checks()
    # Re-open watches every few minutes: a silently dropped watch connection otherwise stalls
    # the operator (nolar/kopf#204, #698).
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.connect_timeout = 30
    # Two replicas: the one with the highest priority works, the other waits (kopf peering).
    # Equal priorities would pause both, so each process draws its own unless one is given.
    settings.peering.priority = int(os.environ.get("GRIDSTAT_OPERATOR_PRIORITY") or random.randint(1, 2**31 - 1))
    settings.peering.lifetime = int(os.environ.get("GRIDSTAT_OPERATOR_PEERING_LIFETIME_S") or 60)
    # A handler that raises something unexpected is retried with backoff, never crash-looped.
    settings.execution.max_workers = 4
    config = configs.OperatorConfig.from_env()
    memo.config = config
    memo.brokers = brokering.Brokers(config)
    memo.locks = {}
    memo.checked = {}
    logger.info("gridstat operator: clouds %s, root broker %s, peering priority %d",
                dict(config.brokers), config.root_broker, settings.peering.priority)


@kopf.on.cleanup()
async def operator_cleanup(memo: kopf.Memo, **_: Any) -> None:
    """When the operator stops: close the broker channels."""
    if getattr(memo, "brokers", None) is not None:
        await memo.brokers.close()


@kopf.on.probe(id="brokers")
def operator_brokers(memo: kopf.Memo, **_: Any) -> dict[str, str]:
    """Liveness/readiness detail: the brokers this operator talks to (their health is not
    the operator's: a down broker shows in resource conditions, not as a restart loop)."""
    config = getattr(memo, "config", None)
    return dict(config.brokers) if config is not None else {}
