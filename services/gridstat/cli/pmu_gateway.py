"""``gridstat pmu-gateway``: publish a C37.118 PMU's or PDC's channels as GridStat status variables.

    gridstat pmu-gateway --device 127.0.0.1:4712 --idcode 7734 --edge 127.0.0.1:7801 \\
        [--data tcp|udp] [--udp-port 4713] [--config cfg2|cfg3] [--map names.yaml] \\
        [--stats-every-s 1] [-o json] [--tls-ca PEM --tls-cert PEM --tls-key PEM]

It connects to the device as a C37.118.2-2011 client (turn data off, ask for CFG-2 or CFG-3 and the
header, turn data on), reads its data frames over the same TCP connection or over UDP, and publishes
every channel as ``<station>/<channel>`` through the edge router (``--edge``: its control port), one
SDK publisher per station. When the device goes away it reconnects with a capped, jittered back-off.
docs/pmu-gateway.md describes the variables, attributes, time quality and counters.

It prints ``READY name=<name> device=<host:port> data=<tcp|udp> [udp_port=<port>] edge=<host:port>``,
then a stats line every ``--stats-every-s`` (``-o json``: one object per line)::

    {"kind":"pmu-gateway","name":"pmu-gateway","final":false,"ts_ms":..,"uptime_s":..,"state":"streaming",
     "frames":{"data":N,"cfg2":1,...},"drops":{"bad_crc":1,...},"reconnects":0,"events_published":M,...}

SIGTERM or SIGINT (or ``--duration-s``) stop it with a final line; exit 0.
"""

from __future__ import annotations

import argparse
from typing import Any

from gridstat.cli import gateways
from gridstat.cli.common import EXIT_CODES_HELP
from gridstat.cli.traffic import Runner, add_edge_client_arguments, check_edge, tls_files
from gridstat.core import serving
from gridstat.core.model import split_variable_name
from gridstat.core.tls import TlsFiles
from gridstat.errors import ValidationError
from gridstat.gateways.pmu import GatewayOptions, NameMap, PmuGateway, load_name_map

#: The standard's registered ports (C37.118.2-2011 Annex F): TCP 4712, UDP 4713.
DEFAULT_DEVICE_PORT = 4712
DEFAULT_UDP_PORT = 4713


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXIT_CODES_HELP
    p.add_argument("--device", required=True, metavar="HOST:PORT",
                   help=f"the PMU's or PDC's TCP command port (port {DEFAULT_DEVICE_PORT} if omitted)")
    p.add_argument("--allow-remote-device", action="store_true",
                   help="allow a --device outside 127.0.0.1 (a real device on the network)")
    p.add_argument("--idcode", type=int, required=True, metavar="N", help="the device's IDCODE (1..65534)")
    p.add_argument("--data", choices=("tcp", "udp"), default="tcp",
                   help="data frames over the TCP connection, or sent by the device to --udp-port (default tcp)")
    p.add_argument("--udp-host", default="127.0.0.1", metavar="ADDR",
                   help="address to bind for UDP data (default 127.0.0.1)")
    p.add_argument("--udp-port", type=int, default=DEFAULT_UDP_PORT, metavar="PORT",
                   help=f"UDP port the device sends data frames to, with --data udp (default {DEFAULT_UDP_PORT})")
    p.add_argument("--config", choices=("cfg2", "cfg3"), default="cfg2",
                   help="configuration frame to ask for (cfg3 falls back to cfg2 if unanswered; default cfg2)")
    p.add_argument("--no-header", action="store_true", help="do not ask for the header frame")
    p.add_argument("--edge", required=True, metavar="HOST:PORT", help="control port of the edge router")
    p.add_argument("--map", default=None, metavar="FILE",
                   help='YAML or JSON: "STN/CHNAM": "publisher/variable" and "STN": "publisher" (docs/pmu-gateway.md)')
    p.add_argument("--only", default=None, metavar="LIST",
                   help="publish only these variables (publisher/variable, comma-separated, after --map); the "
                        "device's other channels are neither registered nor sent")
    p.add_argument("--priority", type=int, default=1, metavar="P", help="0 alert .. 6 low (default 1)")
    gateways.add_name_arguments(p, "pmu-gateway")
    t = p.add_argument_group("timeouts and reconnecting")
    t.add_argument("--connect-timeout-s", type=float, default=5.0, metavar="S", help="TCP connect timeout (default 5)")
    t.add_argument("--config-timeout-s", type=float, default=5.0, metavar="S",
                   help="ask for the configuration again after S seconds without one (default 5)")
    t.add_argument("--data-timeout-s", type=float, default=5.0, metavar="S",
                   help="reconnect after S seconds without a data frame (at least 3 frame periods; default 5)")
    t.add_argument("--config-poll-s", type=float, default=0.0, metavar="S",
                   help="ask for the configuration every S seconds while streaming (0: only when needed)")
    gateways.add_reconnect_arguments(t)
    add_edge_client_arguments(p, log_level_help="log level on stderr (default WARNING)")


def parse_device(value: str, *, allow_remote: bool) -> tuple[str, int]:
    """``HOST[:PORT]``; a host other than 127.0.0.1 only with ``--allow-remote-device``."""
    return gateways.parse_device_address(value, allow_remote=allow_remote, default_port=DEFAULT_DEVICE_PORT,
                                         flag="--device", remote_flag="--allow-remote-device", peer="a device")


def options_of(args: argparse.Namespace) -> GatewayOptions:
    host, port = parse_device(args.device, allow_remote=args.allow_remote_device)
    if not 0 <= args.idcode <= 0xFFFF:
        raise ValidationError(f"--idcode must be 0..65535, not {args.idcode}", field="idcode")
    if not 0 <= args.udp_port < 65536:
        raise ValidationError(f"--udp-port must be 0..65535, not {args.udp_port}", field="udp_port")
    gateways.check_priority(args.priority)
    gateways.check_common(args, positive=("connect_timeout_s", "config_timeout_s", "data_timeout_s", "retry_initial_s",
                                          "retry_max_s", "timeout"),
                          non_negative=("config_poll_s", "healthy_after_s", "stats_every_s"))
    return GatewayOptions(
        device_host=host, device_port=port, edge=check_edge(args.edge), idcode=args.idcode, data=args.data,
        udp_host=args.udp_host, udp_port=args.udp_port, cfg3=args.config == "cfg3", request_header=not args.no_header,
        connect_timeout_s=args.connect_timeout_s, config_timeout_s=args.config_timeout_s,
        data_timeout_s=args.data_timeout_s, config_poll_s=args.config_poll_s, retry_initial_s=args.retry_initial_s,
        retry_max_s=args.retry_max_s, healthy_after_s=args.healthy_after_s, priority=args.priority,
        edge_timeout_s=args.timeout)


def stats(args: argparse.Namespace, runner: Runner, gateway: PmuGateway, *, final: bool) -> tuple[dict[str, Any], str]:
    s = gateway.stats
    data = {**gateways.stats_head("pmu-gateway", args, runner, final=final), **s.as_dict()}
    frames = gateways.counts_text(s.frames)
    drops = gateways.counts_text(s.drops.as_dict())
    text = (f"{'FINAL ' if final else ''}pmu-gateway {args.name}: state={s.state} frames={frames} drops={drops} "
            f"reconnects={s.reconnects} config_changes={s.config_changes} published={s.events_published} "
            f"unpublished={s.events_unpublished} failed={s.events_failed} variables={s.registrations}")
    return data, text


async def _run(args: argparse.Namespace, options: GatewayOptions, names: NameMap, tls: TlsFiles | None) -> int:
    runner = Runner("pmu-gateway", args)
    runner.install()
    only = None
    if args.only is not None:
        only = frozenset(n.strip() for n in args.only.split(",") if n.strip())
        for n in only:
            split_variable_name(n)
    gateway = PmuGateway(options, names=names, tls=tls, only=only)
    udp = ""
    if options.data == "udp":
        try:
            udp = f" udp_port={await gateway.start_udp()}"
        except OSError as exc:
            raise ValidationError(f"--udp-port {options.udp_port}: cannot bind {options.udp_host}: {exc}",
                                  field="udp_port") from None
    runner.line(f"READY name={args.name} device={options.device_host}:{options.device_port} data={options.data}"
                f"{udp} edge={options.edge}")
    return await gateways.serve(runner, gateway.run, lambda final: stats(args, runner, gateway, final=final))


def run(args: argparse.Namespace) -> int:
    options = options_of(args)
    names = load_name_map(args.map) if args.map else NameMap()
    tls = tls_files(args)
    return serving.run(args, lambda: _run(args, options, names, tls))
