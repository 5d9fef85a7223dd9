"""A PDC client made of synchrophasor (pypmu)'s ``Pdc``, run in its own process by test_pdc_server.py.

    python pypmu_pdc_client.py --port N --idcode N --frames N --timeout-s S

It connects, asks for the header and CFG-2, prints ``STARTED`` once it turned data on, then prints one
JSON object per data frame ``get()`` returns (pypmu's decoded values and the frame's raw bytes), and
exits after ``--frames`` data frames or ``--timeout-s``. pypmu's ``Pdc`` reads ``buffer_size`` bytes for
the first 4 bytes of a frame, so a buffer of 4 makes it read exactly one frame at a time (with a larger
one, two frames in one ``recv`` are lost). pypmu's ``Pdc`` speaks TCP only.
"""

from __future__ import annotations

import argparse
import collections
import collections.abc
import json
import socket
import sys
import time
from typing import Any

if not hasattr(collections, "Sequence"):  # pypmu 1.0.0a0 on Python >= 3.10
    collections.Sequence = collections.abc.Sequence  # type: ignore[attr-defined]

from synchrophasor.frame import ConfigFrame2, DataFrame, HeaderFrame
from synchrophasor.pdc import Pdc


class Recorder:
    """The PDC's socket, keeping the bytes it reads (the raw frame behind pypmu's decoding)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def recv(self, n: int) -> bytes:
        data = self.sock.recv(n)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.buf += data
        return data

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--idcode", type=int, required=True)
    p.add_argument("--frames", type=int, required=True)
    p.add_argument("--timeout-s", type=float, required=True)
    args = p.parse_args()
    pdc = Pdc(pdc_id=args.idcode, pmu_ip="127.0.0.1", pmu_port=args.port, buffer_size=4)
    pdc.logger.setLevel("ERROR")
    pdc.run()
    if pdc.pmu_socket is None:
        return 4
    pdc.pmu_socket.settimeout(args.timeout_s)
    rec = Recorder(pdc.pmu_socket)
    pdc.pmu_socket = rec
    header = pdc.get_header()
    config = pdc.get_config("cfg2")
    assert isinstance(header, HeaderFrame) and isinstance(config, ConfigFrame2)
    print(json.dumps({"header": header.get_header(), "stations": config.get_station_name(),
                      "idcodes": config.get_stream_id_code(), "data_rate": config.get_data_rate(),
                      "time_base": config.get_time_base(), "channels": config.get_channel_names()}), flush=True)
    pdc.start()
    print("STARTED", flush=True)
    deadline = time.monotonic() + args.timeout_s
    got = 0
    while got < args.frames and time.monotonic() < deadline:
        rec.buf.clear()
        frame = pdc.get()
        if not isinstance(frame, DataFrame):
            continue
        got += 1
        out: dict[str, Any] = {"soc": frame.get_soc(), "fracsec": frame.get_frasec()[0],
                               "phasors": frame.get_phasors(), "freq": frame.get_freq(),
                               "dfreq": frame.get_dfreq(), "analog": frame.get_analog(),
                               "digital": frame.get_digital(), "status": [s[0] for s in frame.get_stat()],
                               "raw": bytes(rec.buf).hex()}
        print(json.dumps(out), flush=True)
    pdc.stop()
    pdc.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
