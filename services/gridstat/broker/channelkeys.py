"""Per-channel datagram authentication keys handed out by the leaf broker (docs/security.md).

``gridstat broker --channel-auth routers|all``: the broker derives each event channel's key from a
32-byte master secret kept next to its state (``<state>.channel-key``, mode 0600, created on first
use; or ``--channel-key-file``), so a restarted broker hands out the same keys and both ends of a
channel derive the same one without storing per-channel keys:

* a router-router channel inside the cloud (level 1): HMAC-SHA256(master, "link" | lower id | higher id);
* a client's channel at its edge router (``all``): HMAC-SHA256(master, "client" | edge id | client id),
  returned to the client in ``RegisterClientReply.channel_key`` (through the edge proxy, over TLS).

Keys travel only on the control plane (``Channel.key`` in AddChannel/UpdateChannel), which must
then run over (m)TLS. A condensation function's output channel in a router slot is a client channel
like any other (the slot signs its output with it); a standalone condensation host is an ordinary
client. Inter-cloud channels (level > 1) do not derive from this master: their key is chosen by the
broker that registers them (a parent with ``--channel-auth``) and stored with the leaf's
``ForeignChannel`` (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from pathlib import Path

from gridstat.broker.state import DesiredChannel
from gridstat.errors import ValidationError

MASTER_LEN = 32
MODES = ("off", "routers", "all")
_IDS = struct.Struct(">II")


class ChannelKeys:
    def __init__(self, master: bytes, *, clients: bool) -> None:
        if len(master) < MASTER_LEN:
            raise ValidationError(f"the channel master key needs {MASTER_LEN} bytes", field="channel_key_file")
        self._master = master
        #: Whether client channels (publishers, subscribers) are keyed too (``--channel-auth all``).
        self.clients = clients

    @classmethod
    def load_or_create(cls, path: Path, *, clients: bool) -> ChannelKeys:
        """Read the master secret (hex) from ``path``, creating it (0600) with random bytes if missing."""
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(os.urandom(MASTER_LEN).hex() + "\n")
        try:
            master = bytes.fromhex(path.read_text().strip())
        except ValueError as exc:
            raise ValidationError(f"{path}: not a hex channel master key: {exc}", field="channel_key_file") from None
        return cls(master, clients=clients)

    def _derive(self, label: bytes, a: int, b: int) -> bytes:
        return hmac.new(self._master, label + _IDS.pack(a, b), hashlib.sha256).digest()

    def link(self, a_id: int, b_id: int) -> bytes:
        return self._derive(b"link", min(a_id, b_id), max(a_id, b_id))

    def client(self, edge_id: int, client_id: int) -> bytes:
        return self._derive(b"client", edge_id, client_id)

    def for_channel(self, router_id: int, d: DesiredChannel, *, keyed_client: bool = True) -> bytes:
        """The key of channel ``d`` on router ``router_id``; b'' when the channel is not keyed."""
        if d.kind == "router":
            return self.link(router_id, d.peer_id) if d.level == 1 else b""
        if self.clients and keyed_client:
            return self.client(router_id, d.peer_id)
        return b""
