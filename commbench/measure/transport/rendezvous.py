"""Where torch.distributed ranks meet when mpirun (not torchrun) started them, and how long
torch waits before its own watchdog fires.

Rank 0 picks an address the other hosts can reach: the interface NCCL_SOCKET_IFNAME or
GLOO_SOCKET_IFNAME names (NCCL's syntax: comma-separated prefixes, `^` excludes, `=` exact),
else the first non-loopback IPv4 interface; a loopback address is refused when the job spans
hosts (`gethostbyname(gethostname())` is 127.0.1.1 on many hosts, so start-up would wait for
the timeout). Under torchrun, MASTER_ADDR is torchrun's and used as is.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
from collections.abc import Mapping, Sequence

from commbench.errors import UsageError

SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


def interface_addresses() -> list[tuple[str, str]]:
    """(interface, IPv4 address) of every interface that has one, in kernel order."""
    out = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            packed = struct.pack("256s", name.encode()[:15])
            try:
                addr = fcntl.ioctl(s.fileno(), SIOCGIFADDR, packed)[20:24]
            except OSError:
                continue  # no IPv4 address
            out.append((name, socket.inet_ntoa(addr)))
    return out


def _matches(name: str, spec: str) -> bool:
    """Does interface `name` pass an NCCL_SOCKET_IFNAME-style filter?"""
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    parts = [p for p in spec.lstrip("=").split(",") if p]
    hit = any(name == p if exact else name.startswith(p) for p in parts)
    return hit != exclude


def _loopback(addr: str) -> bool:
    return ipaddress.ip_address(addr).is_loopback


def choose_address(
    interfaces: Sequence[tuple[str, str]], env: Mapping[str, str], spans_hosts: bool
) -> str:
    """The rendezvous address from (interface, address) pairs: MASTER_ADDR if set, else the
    first interface the socket-interface variables allow, preferring non-loopback; loopback
    only for a job on one host. Raises UsageError when nothing fits."""
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"]
    spec_var = next((v for v in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME") if env.get(v)), None)
    allowed = [(n, a) for n, a in interfaces if spec_var is None or _matches(n, env[spec_var])]
    outside = [a for _, a in allowed if not _loopback(a)]
    if outside:
        return outside[0]
    if not spans_hosts:
        return "127.0.0.1"
    named = f" matching {spec_var}={env[spec_var]!r}" if spec_var else ""
    raise UsageError(
        f"the job spans hosts but no non-loopback IPv4 interface{named} was found for the "
        "rendezvous (set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME or MASTER_ADDR)"
    )


def rendezvous_address(spans_hosts: bool) -> str:
    """This host's rendezvous address for a job that does (or does not) span hosts."""
    return choose_address(interface_addresses(), os.environ, spans_hosts)


def free_port() -> int:
    """A TCP port free on this host now."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def process_group_timeout_s(watchdog_s: float) -> float:
    """torch's process-group timeout: a margin above commbench's --timeout watchdog, so a hung
    point is reported by commbench (which names the point) and not raced by torch's NCCL
    watchdog tearing the process down first."""
    return watchdog_s + max(60.0, 0.5 * watchdog_s)
