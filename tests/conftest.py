"""Shared pytest setup: integration tests run after the unit tests."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: 1 if item.get_closest_marker("integration") else 0)
