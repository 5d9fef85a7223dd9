"""The embedded deployment's supervisor: a router or broker process that exits by itself is started
again, on the same ports and with the same state file, after a back-off (docs/topology.md,
"Restarts"), as the kubelet restarts a crashed container of a pod.

The back-off doubles from :data:`FIRST_BACKOFF_S` up to :data:`MAX_BACKOFF_S` while the child keeps
crashing and starts over once it has stayed up :data:`RESET_AFTER_S`; the kubelet's CrashLoopBackOff
does the same from 10 s to 5 min. :func:`next_backoff_s` is the rule, pure; :class:`Supervisor`
applies it to the children of ``gridstat up`` (``demo.processes``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from gridstat.demo.processes import ChildProcess, StartupError, exit_text

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
#: Up this long after a restart, a child's next crash waits FIRST_BACKOFF_S again.
RESET_AFTER_S = 30.0
#: How often the supervisor looks at its children.
WATCH_EVERY_S = 0.1


def next_backoff_s(previous_s: float | None, up_for_s: float) -> float:
    """The wait before restarting a child that crashed ``up_for_s`` after its last start, given the
    previous wait (None: never restarted)."""
    if previous_s is None or up_for_s >= RESET_AFTER_S:
        return FIRST_BACKOFF_S
    return min(MAX_BACKOFF_S, previous_s * 2)


class Supervisor:
    """Watches ``children`` until ``stop`` is set; restarts each that exits with its own back-off and
    says so through ``say`` (one line per crash and per restart)."""

    def __init__(self, children: Sequence[ChildProcess], stop: asyncio.Event, say: Callable[[str], None]) -> None:
        self.children = list(children)
        self.stop = stop
        self.say = say
        self._backoff_s: dict[str, float] = {}
        self._started_at = {c.name: time.monotonic() for c in self.children}
        #: Restarts under way (a child may take a while to print READY; the others are watched meanwhile).
        self._restarting: dict[str, asyncio.Task[None]] = {}

    async def run(self) -> None:
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                for child in self.children:
                    self._look_at(child, now)
                try:
                    await asyncio.wait_for(self.stop.wait(), WATCH_EVERY_S)
                except TimeoutError:
                    pass
        finally:
            for task in self._restarting.values():
                task.cancel()
            await asyncio.gather(*self._restarting.values(), return_exceptions=True)

    def _look_at(self, child: ChildProcess, now: float) -> None:
        proc = child.proc
        task = self._restarting.get(child.name)
        if task is not None and not task.done():
            return
        if proc is None or proc.returncode is None or child.stopping or self.stop.is_set():
            return
        if child.restart_at is None:  # a crash just seen
            wait = next_backoff_s(self._backoff_s.get(child.name), now - self._started_at[child.name])
            self._backoff_s[child.name] = wait
            child.crash_codes.append(proc.returncode)
            child.restart_at = now + wait
            self.say(f"  supervisor: {child.what} {child.name} (pid {proc.pid}) {exit_text(proc.returncode)}; "
                     f"restarting in {wait:g} s (log: {child.log_path})")
        elif now >= child.restart_at:
            self._restarting[child.name] = asyncio.create_task(self._restart(child))

    async def _restart(self, child: ChildProcess) -> None:
        self._started_at[child.name] = time.monotonic()
        try:
            await child.start()
        except StartupError as exc:
            child.restart_at = None
            if child.proc is not None and child.proc.returncode is None:
                child.proc.kill()  # no READY in time: ended, so the next look backs off further
                await child.proc.wait()
            self.say(f"  supervisor: {child.what} {child.name} did not come back: {exc}")
            return
        child.restart_at = None
        child.restarts += 1
        self.say(f"  supervisor: {child.what} {child.name} restarted (pid {child.pid}, restart {child.restarts})")
