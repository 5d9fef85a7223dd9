"""A C37.118 device for the pmu-gateway tests, made of synchrophasor (pypmu): its own process.

    python tests/integration/pypmu_device.py --port 0 --status FILE [--mode pypmu|server] [--pmus 1|2]
        [--rate 30] [--data tcp|udp --udp-to PORT] [--extra-channel] [--change-after-s S]

``--mode pypmu`` is pypmu's own ``Pmu`` (TCP; it forks a busy child per connection, so the test runs
this script in its own process group and kills the group). ``--mode server`` is a small device on
pypmu's frames that also sends data over UDP (``--udp-to``, once a TCP client turned data on) and
changes its configuration while connected (``--change-after-s``: the STAT configuration-change bit
for ``--flag-s``, then one more analog channel and CFGCNT + 1). Every data frame carries explicit SOC
and FRACSEC on the TIME_BASE grid (frame k of a second at ``round(k * TIME_BASE / rate)``) with message
time quality 4, and values that are functions of the frame number (``expected``), so the test knows
what was sent. The bound port is written to ``--status`` as ``READY port=N``.
"""

from __future__ import annotations

import argparse
import math
import socket
import threading
import time
from typing import Any

TIME_BASE = 1_000_000
TIME_QUALITY = 4  # Table 4: within 1 us of UTC
FLAG_BIT = 0x0400  # STAT bit 10, configuration change (6.3.1)
PH_UNIT = 100_000  # 1.0 V per bit of a 16-bit phasor (PHUNIT is in 1e-5 V)
STATIONS = ("Station A", "Station B")
STREAM_IDCODE = 7734


def station_layout(i: int, extra: bool) -> dict[str, Any]:
    """PMU ``i``: 0 has float polar phasors and float analogs, 1 16-bit rectangular phasors and 16-bit
    analogs; both 16-bit FREQ/DFREQ (pypmu takes a float FREQ for a deviation and refuses 60 Hz)."""
    analogs = ["ANALOG1", "ANALOG2"] if extra else ["ANALOG1"]
    return {"station": STATIONS[i], "idcode": 100 + i, "format": (True, True, True, False) if i == 0 else
            (False, False, False, False), "phasors": ["VA", "VB"], "analogs": analogs,
            "digitals": [f"BRK{i} {b}" for b in range(16)], "cfgcnt": 5 + int(extra)}


def frame_number(soc: int, count: int, rate: int) -> int:
    return soc * rate + round(count * rate / TIME_BASE)


Raw = tuple[list[tuple[float, float]], float, float, list[float], list[int]]


def raw_values(i: int, n: int, n_analogs: int) -> Raw:
    """What PMU ``i`` sends in frame ``n`` (as on the wire)."""
    k = n % 100_000
    if i == 0:
        phasors = [(1000.0 + j + k % 10, 0.1 * (j + 1) + 0.01 * (k % 50)) for j in range(2)]
        analogs = [float(k % 1000 + a) for a in range(n_analogs)]
    else:
        phasors = [(1000 + j + k % 10, 100 * (j + 1)) for j in range(2)]
        analogs = [k % 1000 + 100 + a for a in range(n_analogs)]
    freq, dfreq = k % 100, i + 1  # mHz off FNOM, and Hz/s x 100 (6.3, Table 6)
    return phasors, freq, dfreq, analogs, [(7 * k + i) & 0xFFFF]  # type: ignore[return-value]


def expected(i: int, n: int, n_analogs: int) -> dict[str, Any]:
    """The values the gateway must publish for PMU ``i``'s frame ``n``, by variable (engineering units)."""
    phasors, freq, dfreq, analogs, digitals = raw_values(i, n, n_analogs)
    out: dict[str, Any] = {}
    for j, (a, b) in enumerate(phasors):
        if i == 0:
            out[("VA", "VB")[j]] = {"magnitude": a, "angle": b}
        else:
            out[("VA", "VB")[j]] = {"magnitude": math.hypot(a, b), "angle": math.atan2(b, a)}
    out["freq"] = 60.0 + freq * 1e-3
    out["dfreq"] = dfreq * 1e-2
    for a, v in enumerate(analogs):
        out[f"ANALOG{a + 1}"] = float(v)
    out[f"BRK{i}_0"] = digitals[0]
    return out


def main() -> None:
    import collections
    import collections.abc

    if not hasattr(collections, "Sequence"):
        collections.Sequence = collections.abc.Sequence  # type: ignore[attr-defined]
    from synchrophasor import frame as pypmu

    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--status", required=True)
    p.add_argument("--mode", choices=("pypmu", "server"), default="pypmu")
    p.add_argument("--pmus", type=int, default=1, choices=(1, 2))
    p.add_argument("--rate", type=int, default=30)
    p.add_argument("--data", choices=("tcp", "udp"), default="tcp")
    p.add_argument("--udp-to", type=int, default=0)
    p.add_argument("--extra-channel", action="store_true")
    p.add_argument("--change-after-s", type=float, default=0.0)
    p.add_argument("--flag-s", type=float, default=1.0)
    p.add_argument("--duration-s", type=float, default=120.0)
    args = p.parse_args()

    def config(extra: bool) -> Any:
        lays = [station_layout(i, extra) for i in range(args.pmus)]

        def per(key: str, f: Any = None) -> Any:
            vals = [f(x) if f else x[key] for x in lays]
            return vals if args.pmus > 1 else vals[0]

        return pypmu.ConfigFrame2(
            STREAM_IDCODE, TIME_BASE, args.pmus, per("station"), per("idcode"), per("format"),
            per("", lambda x: len(x["phasors"])), per("", lambda x: len(x["analogs"])), per("", lambda x: 1),
            per("", lambda x: x["phasors"] + x["analogs"] + x["digitals"]),
            per("", lambda x: [(PH_UNIT, "v"), (PH_UNIT, "i")]), per("", lambda x: [(1, "rms")] * len(x["analogs"])),
            per("", lambda x: [(0x0000, 0xFFFF)]), per("", lambda x: 60), per("cfgcnt"), args.rate,
            soc=int(time.time()), frasec=(0, "+", False, False, TIME_QUALITY))

    def data_frame(cfg: Any, n: int, soc: int, count: int, stat: int, extra: bool) -> Any:
        n_analogs = 2 if extra else 1
        blocks = [raw_values(i, n, n_analogs) for i in range(args.pmus)]

        def per(idx: int) -> Any:
            vals = [b[idx] for b in blocks]
            return vals if args.pmus > 1 else vals[0]

        stats = [stat] * args.pmus if args.pmus > 1 else stat
        return pypmu.DataFrame(STREAM_IDCODE, stats, per(0), per(1), per(2), per(3), per(4), cfg, soc=soc,
                               frasec=(count, "+", False, False, TIME_QUALITY))

    state: dict[str, Any] = {"extra": args.extra_channel, "cfg": config(args.extra_channel), "flag": False,
                             "clients": []}
    lock = threading.Lock()

    if args.mode == "pypmu":
        from synchrophasor.pmu import Pmu

        Pmu.logger.setLevel("WARNING")
        pmu = Pmu(pmu_id=STREAM_IDCODE, data_rate=args.rate, port=args.port, ip="127.0.0.1", set_timestamp=False)
        pmu.set_configuration(state["cfg"])
        pmu.cfg1 = state["cfg"]
        pmu.header = pypmu.HeaderFrame(STREAM_IDCODE, "pypmu device for the gridstat tests")
        pmu.run()
        port = pmu.socket.getsockname()[1]

        def send(raw: Any) -> None:
            pmu.send(raw)
    else:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", args.port))
        srv.listen(4)
        port = srv.getsockname()[1]
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

        def recv_exact(conn: socket.socket, n: int) -> bytes:
            buf = b""
            while len(buf) < n:
                chunk = conn.recv(n - len(buf))
                if not chunk:
                    raise ConnectionError("closed")
                buf += chunk
            return buf

        def serve(conn: socket.socket) -> None:
            client = {"conn": conn, "on": False}
            with lock:
                state["clients"].append(client)
            try:
                while True:
                    head = recv_exact(conn, 4)
                    raw = head + recv_exact(conn, int.from_bytes(head[2:4], "big") - 4)
                    frame = pypmu.CommonFrame.convert2frame(raw)
                    command = frame.get_command() if isinstance(frame, pypmu.CommandFrame) else None
                    with lock:
                        if command == "start":
                            client["on"] = True
                        elif command == "stop":
                            client["on"] = False
                        elif command == "cfg2":
                            conn.sendall(state["cfg"].convert2bytes())
                        elif command == "header":
                            conn.sendall(pypmu.HeaderFrame(STREAM_IDCODE, "gridstat test device").convert2bytes())
                        # cfg1, cfg3 and anything else: not answered (CFG-3 is optional, 6.6)
            except (ConnectionError, OSError):
                pass
            finally:
                with lock:
                    state["clients"].remove(client)
                conn.close()

        def accept() -> None:
            while True:
                conn, _ = srv.accept()
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()

        def send(raw: Any) -> None:
            data = raw.convert2bytes()
            with lock:
                on = [c for c in state["clients"] if c["on"]]
                for c in on if args.data == "tcp" else []:
                    try:
                        c["conn"].sendall(data)
                    except OSError:
                        pass
                if args.data == "udp" and on:
                    udp.sendto(data, ("127.0.0.1", args.udp_to))

    with open(args.status, "w") as f:
        f.write(f"READY port={port}\n")
    start = time.time()
    # Frames are counted in whole numbers from the epoch: a float instant summed period by period
    # drifts below a second boundary and would stamp frame 0 of the next second with the old SOC.
    k = math.floor(start * args.rate) + 1
    while time.time() - start < args.duration_s:
        next_t = k / args.rate
        time.sleep(max(0.0, next_t - time.time()))
        soc, idx = divmod(k, args.rate)
        count = round(idx * TIME_BASE / args.rate)
        elapsed = next_t - start
        stat = 0
        if args.change_after_s and args.mode == "server":
            if args.change_after_s <= elapsed < args.change_after_s + args.flag_s:
                stat = FLAG_BIT
            elif elapsed >= args.change_after_s + args.flag_s and not state["extra"]:
                with lock:
                    state["extra"] = True
                    state["cfg"] = config(True)
        send(data_frame(state["cfg"], k, soc, count, stat, state["extra"]))
        k += 1


if __name__ == "__main__":
    main()
