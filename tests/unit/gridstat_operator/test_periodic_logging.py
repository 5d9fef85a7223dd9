"""The operator's periodic checks (kopf timers) log at DEBUG unless they change something."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest

import gridstat_operator.handlers  # noqa: F401  (registers the handlers)
from gridstat_operator.handlers import common

READY = {"type": "Ready", "status": "True", "reason": "Admitted", "message": "ok",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}


@pytest.fixture()
def objects_logger() -> logging.Logger:
    logger = logging.getLogger("test.kopf.objects")
    logger.filters.clear()
    common.quiet_periodic_checks(logger)
    common.quiet_periodic_checks(logger)  # once, however often start-up runs
    assert len(logger.filters) == 1
    return logger


def test_every_timer_of_the_operator_is_a_periodic_check() -> None:
    spawning = kopf.get_default_registry()._spawning.get_all_handlers()
    timers = {h.id for h in spawning}
    assert timers == {"subscription_check", "mode_refresh", "activemode_watch"}
    assert all(type(h).__name__ == "TimerHandler" for h in spawning)  # no daemons the filter misses


def test_a_timer_success_is_debug(objects_logger: logging.Logger, caplog: pytest.LogCaptureFixture) -> None:
    objects_logger.setLevel(logging.INFO)
    with caplog.at_level(logging.INFO, logger=objects_logger.name):
        objects_logger.info("Timer 'subscription_check' succeeded.")
        objects_logger.info("Handler 'subscription_reconcile' succeeded.")  # a change: stays INFO
        objects_logger.warning("Timer 'subscription_check' failed with an exception and will try again")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "Handler 'subscription_reconcile' succeeded."),
        ("WARNING", "Timer 'subscription_check' failed with an exception and will try again")]
    caplog.clear()
    objects_logger.setLevel(logging.DEBUG)  # --verbose: still there, at DEBUG
    with caplog.at_level(logging.DEBUG, logger=objects_logger.name):
        objects_logger.info("Timer 'mode_refresh' succeeded.")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("DEBUG", "Timer 'mode_refresh' succeeded.")]


def test_report_change_is_info_only_when_the_status_moves(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.operator.check")
    body: dict[str, Any] = {"status": {"conditions": [READY], "selected": 3}}
    with caplog.at_level(logging.DEBUG, logger=logger.name):
        assert common.report_change(logger, "mode_refresh", body, {}) == []
        # the same conditions with a new timestamp are not a change
        same = {"status": {"conditions": [{**READY, "lastTransitionTime": "2026-01-02T00:00:00Z"}], "selected": 3}}
        assert common.report_change(logger, "mode_refresh", body, same) == []
        moved = {"status": {"conditions": [READY], "selected": 4}}
        assert common.report_change(logger, "mode_refresh", body, moved) == ["selected"]
    assert [r.levelname for r in caplog.records] == ["DEBUG", "DEBUG", "INFO"]
    assert caplog.records[-1].getMessage() == "mode_refresh: status changed: selected"


async def test_periodic_check_reports_after_the_run(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.operator.wrapped")
    seen: list[str] = []

    @common.periodic_check
    async def some_check(*, body: Any, patch: Any, **_: Any) -> None:
        seen.append("ran")
        patch.setdefault("status", {})["phase"] = "Active"

    assert some_check.__name__ == "some_check"  # kopf's handler id
    with caplog.at_level(logging.DEBUG, logger=logger.name):
        await some_check(body={"status": {"phase": "Planned"}}, patch={}, logger=logger)
    assert seen == ["ran"] and caplog.records[-1].getMessage() == "some_check: status changed: phase"
