"""Where the operator finds its utility's QoS brokers, read once from the environment.

One Helm release serves one utility, so one operator talks to a fixed set of brokers:

* ``GRIDSTAT_BROKERS``: ``CLOUD=HOST:PORT`` pairs, comma separated, one leaf broker per cloud
  (a Subscription or CondensationFunction goes to the leaf broker of its ``spec.cloud``);
* ``GRIDSTAT_DEFAULT_CLOUD``: the cloud of resources that name none (default: the first);
* ``GRIDSTAT_ROOT_BROKER``: where modes are defined and changed, the top of the hierarchy (a
  parent broker with several clouds; default: the default cloud's leaf broker);
* ``GRIDSTAT_BROKER_TIMEOUT_S`` (default 10): deadline of each broker call;
* ``GRIDSTAT_DRIFT_CHECK_S`` (default 60): how often an unchanged resource is compared with
  what its broker holds (a broker restarted on an empty state file gets its subscriptions back);
* ``GRIDSTAT_TLS_CA``, ``GRIDSTAT_TLS_CERT``, ``GRIDSTAT_TLS_KEY``: TLS / mTLS to the brokers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from gridstat.core.tls import TlsFiles


class ConfigError(ValueError):
    """The operator's environment names no broker, or names one badly."""


@dataclass(frozen=True)
class OperatorConfig:
    brokers: Mapping[str, str]
    default_cloud: str
    root_broker: str
    timeout_s: float = 10.0
    drift_check_s: float = 60.0
    tls: TlsFiles | None = field(default=None)

    def broker_for(self, cloud: str) -> str:
        """The leaf broker of ``cloud`` ("" = the default cloud); KeyError for an unknown cloud."""
        return self.brokers[cloud or self.default_cloud]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OperatorConfig:
        env = os.environ if environ is None else environ
        brokers = parse_brokers(env.get("GRIDSTAT_BROKERS", ""))
        if not brokers:
            raise ConfigError("GRIDSTAT_BROKERS names no broker (CLOUD=HOST:PORT,...)")
        default = env.get("GRIDSTAT_DEFAULT_CLOUD") or next(iter(brokers))
        if default not in brokers:
            raise ConfigError(f"GRIDSTAT_DEFAULT_CLOUD {default!r} is not in GRIDSTAT_BROKERS")
        ca, cert, key = (env.get(f"GRIDSTAT_TLS_{k}", "") for k in ("CA", "CERT", "KEY"))
        return cls(
            brokers=brokers,
            default_cloud=default,
            root_broker=env.get("GRIDSTAT_ROOT_BROKER") or brokers[default],
            timeout_s=float(env.get("GRIDSTAT_BROKER_TIMEOUT_S") or 10.0),
            drift_check_s=float(env.get("GRIDSTAT_DRIFT_CHECK_S") or 60.0),
            tls=TlsFiles(cert, key, ca) if (ca or cert) else None,
        )


def parse_brokers(text: str) -> dict[str, str]:
    """``"A=h:1,B=h:2"`` -> ``{"A": "h:1", "B": "h:2"}``; a bare ``HOST:PORT`` is cloud ``default``."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        cloud, sep, address = item.partition("=")
        if not sep:
            cloud, address = "default", item
        host, colon, port = address.strip().rpartition(":")
        if not cloud.strip() or not colon or not host or not port.isdigit():
            raise ConfigError(f"GRIDSTAT_BROKERS entry {item!r} is not CLOUD=HOST:PORT")
        out[cloud.strip()] = address.strip()
    return out
