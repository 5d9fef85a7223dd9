"""The brokers' state databases are readable by their owner only (docs/security.md, "State files")."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from gridstat.broker.parent_store import ParentStore
from gridstat.broker.store import BrokerStore
from gridstat.errors import ValidationError


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture(autouse=True)
def loose_umask():  # type: ignore[no-untyped-def]
    """A umask of 022 (the usual one, which gave 0644 files): the modes below must not depend on it."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_new_leaf_state_file_and_companions_are_0600_in_a_0700_directory(tmp_path: Path) -> None:
    path = tmp_path / "state" / "gridstat" / "A.sqlite"
    store = BrokerStore(str(path))
    with store.transaction():
        store.set_meta("x", 1)  # writes the WAL and its shared-memory index
    companions = [Path(f"{path}{s}") for s in ("-wal", "-shm")]
    assert all(c.exists() for c in companions)
    assert mode(path) == 0o600
    assert [mode(c) for c in companions] == [0o600, 0o600]
    assert mode(path.parent) == 0o700 and mode(path.parent.parent) == 0o700  # the directories it created
    store.close()


def test_new_parent_state_file_is_0600(tmp_path: Path) -> None:
    path = tmp_path / "p" / "P.sqlite"
    store = ParentStore(str(path))
    store.put("child", "A", {"x": 1})
    assert mode(path) == 0o600 and mode(Path(f"{path}-wal")) == 0o600
    assert mode(path.parent) == 0o700
    store.close()


def test_existing_loose_file_is_tightened_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "A.sqlite"
    BrokerStore(str(path)).close()
    os.chmod(path, 0o644)
    wal = Path(f"{path}-wal")
    wal.write_bytes(b"")
    os.chmod(wal, 0o666)
    before = mode(tmp_path)
    with caplog.at_level(logging.WARNING, logger="gridstat.broker.store"):
        store = BrokerStore(str(path))
    assert mode(path) == 0o600 and mode(wal) == 0o600
    assert mode(tmp_path) == before  # an existing directory is not changed
    text = caplog.text
    assert "had mode 0644" in text and "had mode 0666" in text and "tightened to 0600" in text
    store.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gridstat.broker.store"):
        BrokerStore(str(path)).close()
    assert "tightened" not in caplog.text  # already private: nothing to say


def test_existing_private_file_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "A.sqlite"
    s = BrokerStore(str(path))
    s.set_meta("k", "v")
    s.close()
    s = BrokerStore(str(path))
    assert s.get_meta("k") == "v"
    s.close()


def test_uncreatable_directory_is_a_validation_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValidationError) as exc:
        BrokerStore(str(blocker / "sub" / "A.sqlite"))
    assert exc.value.field == "state_path"
