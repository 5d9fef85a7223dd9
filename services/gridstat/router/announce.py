"""A router tells its leaf broker it has started (docs/redundancy.md, "Healing").

A restarted router is empty until its leaf broker rebuilds it; the broker notices a restart at its
next health check of the router, which after a long outage may be seconds away (its back-off). So
once the router serves its control API it calls ``QoSBroker.AnnounceRouter`` with its name: the
broker checks it at once and rebuilds its tables from its own state. The call waits for the broker
to be reachable (gRPC's ``wait_for_ready``) up to ``deadline_s``; a broker that is not there by then
finds the router at its own first check. Nothing but the name is taken from the call: the broker
reaches the router at the address it holds, so a forged announcement only makes it look sooner.
"""

from __future__ import annotations

import logging

import grpc

from gridstat.core import rpc
from gridstat.core.tls import ClientChannel, TlsFiles
from gridstat.v1 import broker_pb2 as pb
from gridstat.v1 import broker_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

#: How long a starting router waits for its broker to take the announcement.
ANNOUNCE_DEADLINE_S = 60.0


async def announce_in_background(broker: str, name: str, boot_id: str, tls: TlsFiles | None) -> None:
    """:func:`announce`, for a task of its own."""
    await announce(broker, name, boot_id, tls)


async def announce(broker: str, name: str, boot_id: str, tls: TlsFiles | None, *,
                   deadline_s: float = ANNOUNCE_DEADLINE_S) -> pb.AnnounceRouterReply | None:
    """Announce router ``name`` to the leaf broker at ``broker``; the reply, or None when the broker
    did not take it in time (logged: the broker's own checks find the router then)."""
    client = ClientChannel(broker, tls, rpc.channel_options())
    try:
        stub = client.stub(pb_grpc.QoSBrokerStub)
        reply: pb.AnnounceRouterReply = await stub.AnnounceRouter(
            pb.AnnounceRouterRequest(name=name, boot_id=boot_id), timeout=deadline_s, wait_for_ready=True)
    except grpc.aio.AioRpcError as exc:
        log.warning("router %s: could not announce itself to its broker %s (%s: %s); it will be found by the "
                    "broker's own checks", name, broker, exc.code().name, exc.details())
        return None
    finally:
        await client.close()
    if not reply.known:
        log.warning("router %s: broker %s does not know this router yet (add it to the topology)", name, broker)
    else:
        log.info("router %s: announced to broker %s%s", name, broker, "; tables rebuilt" if reply.rebuilt else "")
    return reply
