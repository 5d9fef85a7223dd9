"""Shared pytest setup: integration tests run after the unit tests; hypothesis without deadlines."""

from __future__ import annotations

import pytest
from hypothesis import settings

# Property tests check behaviour, not speed (speed is for the benchmarks): no per-example deadline, which
# a machine busy with other work would turn into failures.
settings.register_profile("gridstat", deadline=None)
settings.load_profile("gridstat")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: 1 if item.get_closest_marker("integration") else 0)
