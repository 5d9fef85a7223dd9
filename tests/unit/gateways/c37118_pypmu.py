"""synchrophasor (pypmu), the reference implementation the C37.118 tests compare with.

pypmu 1.0.0a0 still uses ``collections.Sequence``, which Python 3.10 removed; the alias is restored
before its frame module is imported. scripts/setup.sh installs it ([dev] extra).
"""

from __future__ import annotations

import collections
import collections.abc

if not hasattr(collections, "Sequence"):
    collections.Sequence = collections.abc.Sequence  # type: ignore[attr-defined]

from synchrophasor import frame as pypmu

__all__ = ["pypmu"]
