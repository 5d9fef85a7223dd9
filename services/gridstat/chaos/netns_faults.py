"""Loss, duplication and a rate limit on a ``netns.Lab`` link, done by the kernel (nftables, tc tbf).

Why: these are the faults tc netem would add, and this kernel has no ``sch_netem`` (docs/chaos.md).
Loss is an nftables ``numgen random`` drop at the receiving end's prerouting hook (silent, as on a wire:
a drop in the sender's output hook would return EPERM to ``sendto``); duplication an nftables ``dup to``
at the sending end's output hook; the rate a ``tbf`` qdisc on the sending end. Each end gets a table of
its own per link (``gridstat_to_<peer>``), replaced as a whole, with counters of what it did.
"""

from __future__ import annotations

import contextlib
import re

from .netns import Lab, run
from .procs import ChaosError


def replace_table(ns: str, table: str, hook: str, rule: str) -> None:
    """nftables table ``table`` in namespace ``ns`` with one filter chain on ``hook`` holding ``rule``
    (replaces an earlier table of that name)."""
    delete_table(ns, table)
    run("nft", "-f", "-", ns=ns, stdin=f"table ip {table} {{\n chain c {{\n type filter hook {hook} priority 0; "
                                          f"policy accept;\n {rule}\n }}\n}}\n")


def delete_table(ns: str, table: str) -> None:
    """Remove nftables table ``table`` from namespace ``ns`` (nothing if it is not there)."""
    with contextlib.suppress(ChaosError):
        run("nft", "delete", "table", "ip", table, ns=ns)


def table_counter(ns: str, table: str) -> int:
    """Packets the first counter of ``table`` in ``ns`` counted (0 without one)."""
    found = re.search(r"counter packets (\d+)", run("nft", "list", "table", "ip", table, ns=ns))
    return int(found.group(1)) if found else 0


def loss_rule(dev: str, loss: float) -> str:
    """A prerouting rule dropping UDP arriving on ``dev`` with probability ``loss`` (0..1), counted."""
    if loss >= 1.0:  # numgen's range is 0..999: "< 1000" is refused
        return f"iifname \"{dev}\" meta l4proto udp counter drop"
    return f"iifname \"{dev}\" meta l4proto udp numgen random mod 1000 < {round(loss * 1000)} counter drop"


class FaultLab(Lab):
    """A ``Lab`` whose links can also be made lossy, duplicating and rate-limited."""

    def _table(self, a: str, b: str) -> str:
        return f"gridstat_{self.dev(a, b).replace('-', '_')}"

    def _nft(self, ns: str, table: str, hook: str, rule: str) -> None:
        replace_table(ns, table, hook, rule)

    def impair(self, a: str, b: str, *, loss: float = 0.0, duplicate: float = 0.0) -> None:
        """UDP from ``a`` to ``b`` over their link: duplicated with probability ``duplicate`` as it leaves
        ``a`` (nftables ``dup to``), dropped with probability ``loss`` as it enters ``b`` (``numgen
        random``; at ingress, so the sender sees no error, as on a wire). Replaces an earlier impairment."""
        na, nb = self.nodes[a], self.nodes[b]
        # The copy passes the output hook again: the mark set before ``dup`` keeps it from being counted
        # (the kernel's recursion guard already keeps it from being copied).
        self._nft(na.ns, self._table(a, b), "output", f"oifname \"{self.dev(a, b)}\" meta l4proto udp meta mark != "
                  f"0x6773 numgen random mod 1000 < {round(duplicate * 1000)} meta mark set 0x6773 counter "
                  f"dup to {nb.addr} device \"{self.dev(a, b)}\"")
        self._nft(nb.ns, self._table(b, a), "prerouting", loss_rule(self.dev(b, a), loss))

    def counters(self, a: str, b: str) -> dict[str, int]:
        """Packets the impairment of ``a``->``b`` duplicated and dropped so far."""
        counts = {}
        for what, x, y in (("duplicated", a, b), ("dropped", b, a)):
            counts[what] = table_counter(self.nodes[x].ns, self._table(x, y))
        return counts

    def clear(self, a: str, b: str) -> None:
        """Remove the impairment and the rate limit of ``a``->``b``."""
        for x, y in ((a, b), (b, a)):
            delete_table(self.nodes[x].ns, self._table(x, y))
        with contextlib.suppress(ChaosError):
            run("tc", "qdisc", "del", "dev", self.dev(a, b), "root", ns=self.nodes[a].ns)

    def rate(self, a: str, b: str, kbit: int, burst_bytes: int = 4096, latency_ms: int = 20) -> None:
        """A token bucket (tc tbf) on ``a``'s egress to ``b``: what exceeds it waits up to ``latency_ms``,
        then is dropped."""
        run("tc", "qdisc", "replace", "dev", self.dev(a, b), "root", "tbf", "rate", f"{kbit}kbit", "burst",
            str(burst_bytes), "latency", f"{latency_ms}ms", ns=self.nodes[a].ns)

    def rate_drops(self, a: str, b: str) -> int:
        """Packets the token bucket on ``a``'s egress to ``b`` dropped (0 without one)."""
        text = run("tc", "-s", "qdisc", "show", "dev", self.dev(a, b), ns=self.nodes[a].ns)
        found = re.search(r"qdisc tbf .*?dropped (\d+)", text, re.S)
        return int(found.group(1)) if found else 0
