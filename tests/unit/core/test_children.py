"""core.children: the READY line, a child started and stopped, a child that never gets ready."""

from __future__ import annotations

import signal
import sys

import pytest

from gridstat.core import children


def test_ready_lines_parse_into_their_fields() -> None:
    assert children.parse_ready("READY name=e1 port=7801 control_port=7901 metrics_port=9101\n") == {
        "name": "e1", "port": "7801", "control_port": "7901", "metrics_port": "9101"}
    assert children.parse_ready("READY name=A port=7700") == {"name": "A", "port": "7700"}
    for other in ("ready name=x port=1", "READY port=1", "FARM READY", "", "READY"):
        assert children.parse_ready(other) is None, other
    assert children.ready_port({"name": "x", "port": "7801"}) == 7801
    for bad in ({"name": "x"}, {"name": "x", "port": "0"}, {"name": "x", "port": "70000"}, {"name": "x", "port": "p"}):
        with pytest.raises(children.ChildFailed):
            children.ready_port(bad)


def test_a_child_is_started_at_its_ready_line_and_stopped_by_sigterm() -> None:
    code = "import time; print('starting'); print('READY name=c port=1234', flush=True); time.sleep(60)"
    proc, ready = children.spawn([sys.executable, "-c", code], what="the child")
    assert ready == {"name": "c", "port": "1234"} and proc.poll() is None
    assert children.stop(proc, grace_s=5) == -signal.SIGTERM


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('READY name=c port=1', flush=True); time.sleep(60)")
    proc, _ = children.spawn([sys.executable, "-c", code], what="the child")
    assert children.stop(proc, grace_s=0.5) == -signal.SIGKILL


def test_a_child_that_exits_or_stays_silent_fails_naming_it_and_its_last_words() -> None:
    with pytest.raises(children.ChildFailed) as err:
        children.spawn([sys.executable, "-c", "print('bad flag'); raise SystemExit(2)"], what="router r9")
    assert "router r9 did not start (exit code 2" in str(err.value) and "bad flag" in str(err.value)
    with pytest.raises(children.ChildFailed) as err:
        children.spawn([sys.executable, "-c", "import time; time.sleep(30)"], what="broker B", timeout_s=0.5)
    assert "broker B did not start" in str(err.value) and "within 0.5 s" in str(err.value)
