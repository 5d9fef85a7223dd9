"""The decoding UDP receiver under its former name; ``fixtures.DatagramSink`` is the one implementation."""

from .fixtures import DatagramSink as UdpSink

__all__ = ["UdpSink"]
