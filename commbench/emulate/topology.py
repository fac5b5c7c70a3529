"""What an emulated cluster is, without touching the system: names, addresses, rates, ground truth.

Addresses: local rank r of node i owns 10.213.r.(i+1)/16 on `eth<r>` (rail r). A socket bound to
its rank's address leaves by that rank's NIC (a policy rule per address); an unbound one leaves
by the destination's rail (a /24 route per rail), so every flow between two ranks of the same
local rank stays on their rail, both ways. Rates are tc's: `bit` units are powers of 1000, `bps`
means bytes per second. The goodput a TCP stream can reach through tbf is the rate times the
payload share of a frame (tbf counts the Ethernet header; IPv4 + TCP with timestamps take 52 B).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from commbench.errors import UsageError

# tc's rate units (tc(8), "RATES"): bit-based are powers of 1000, "bps" is bytes per second.
RATE_UNITS = {
    "bit": 1.0,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "tbit": 1e12,
    "bps": 8.0,
    "kbps": 8e3,
    "mbps": 8e6,
    "gbps": 8e9,
}
MAX_NODES = 16
MAX_RANKS_PER_NODE = 16
MIN_RATE_BPS = 1e6  # below 1 Mbit/s a sweep's large points take minutes each
MAX_RATE_BPS = 100e9
MTU = 9000  # jumbo frames, as on cluster fabrics: fewer packets per byte for the CPU to move
ETH_HEADER = 14  # counted by tbf (the packet's length at the qdisc)
TCP_IP_HEADERS = 52  # IPv4 20 + TCP 20 + timestamp option 12
TBF_BURST_BYTES = 64 * 1024
TBF_LATENCY_MS = 50  # queue bound: deep enough that TCP never loses a packet to the shaper
SUBNET = "10.213.0.0/16"
RULE_TABLE_BASE = 100
# Kernel settings inside every node (per network namespace), written into the ground truth.
NODE_SYSCTLS = {
    # one host answers ARP for an address only on the NIC that owns it (several NICs, one subnet)
    "net.ipv4.conf.all.arp_ignore": "1",
    "net.ipv4.conf.all.arp_announce": "2",
    # an idle connection keeps its congestion window (RDMA links have no slow start either)
    "net.ipv4.tcp_slow_start_after_idle": "0",
}

ENV_TAG = "COMMBENCH_EMULATE_TAG"  # the prefix of every name an emulation creates


def default_tag() -> str:
    """`cb` and 4 random hex digits, or $COMMBENCH_EMULATE_TAG (to find or script the names)."""
    return os.environ.get(ENV_TAG) or "cb" + secrets.token_hex(2)


_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_rate(text: str) -> float:
    """A tc rate (`1gbit`, `500mbit`, `125mbps`) in bits per second."""
    m = _RATE.match(text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in RATE_UNITS:
        units = ", ".join(RATE_UNITS)
        raise UsageError(f"link rate {text!r}: expected a number and a tc unit ({units})")
    bps = float(m.group(1)) * RATE_UNITS[unit]
    if not MIN_RATE_BPS <= bps <= MAX_RATE_BPS:
        raise UsageError(
            f"link rate {text!r} is {format_rate(bps)}: choose between "
            f"{format_rate(MIN_RATE_BPS)} and {format_rate(MAX_RATE_BPS)}"
        )
    return bps


def format_rate(bps: float) -> str:
    """Bits per second in tc's notation, exactly when the value allows (`500mbit`)."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bps >= scale and (bps / scale) == int(bps / scale):
            return f"{int(bps / scale)}{unit}"
    return f"{int(bps)}bit"


def parse_slow_node(text: str) -> tuple[int, float]:
    """`--slow-node I=RATE`: node index and its NICs' rate in bits per second."""
    index, sep, rate = text.partition("=")
    if not sep or not index.strip().isdigit():
        raise UsageError(f"--slow-node {text!r}: expected NODE=RATE, e.g. 1=500mbit")
    return int(index), parse_rate(rate)


def goodput_bytes_per_s(rate_bps: float, mtu: int = MTU) -> float:
    """TCP payload bytes per second through a tbf of `rate_bps` at this MTU."""
    return rate_bps / 8 * (mtu - TCP_IP_HEADERS) / (mtu + ETH_HEADER)


@dataclass(frozen=True)
class EmulatedCluster:
    """N nodes x R ranks, one NIC per rank, every NIC shaped to its node's rate."""

    nodes: int
    ranks_per_node: int
    link_rate_bps: float
    slow_nodes: Mapping[int, float] = field(default_factory=dict)
    tag: str = field(default_factory=lambda: default_tag())
    mtu: int = MTU

    def __post_init__(self) -> None:
        if not 2 <= self.nodes <= MAX_NODES:
            raise UsageError(f"--nodes {self.nodes}: emulate between 2 and {MAX_NODES} nodes")
        if not 1 <= self.ranks_per_node <= MAX_RANKS_PER_NODE:
            raise UsageError(
                f"--ranks-per-node {self.ranks_per_node}: between 1 and {MAX_RANKS_PER_NODE}"
            )
        for node in self.slow_nodes:
            if not 0 <= node < self.nodes:
                raise UsageError(f"--slow-node {node}: nodes are numbered 0..{self.nodes - 1}")
        if not re.fullmatch(r"cb[a-z0-9]{1,5}", self.tag):
            raise UsageError(
                f"{ENV_TAG}={self.tag!r}: 'cb' and 1-5 lowercase letters or digits "
                "(namespace and link names have a 15-character limit)"
            )

    @property
    def world(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def switch(self) -> str:
        """The namespace holding the bridge every NIC plugs into."""
        return f"{self.tag}sw"

    def namespace(self, node: int) -> str:
        return f"{self.tag}n{node}"

    def hostname(self, node: int) -> str:
        return f"emu-node{node}"

    def nic(self, rail: int) -> str:
        """The NIC of local rank `rail` inside its node."""
        return f"eth{rail}"

    def port(self, node: int, rail: int) -> str:
        """The switch side of a node's NIC (15 characters at most, the kernel's limit)."""
        return f"{self.tag}p{node}r{rail}"

    def address(self, node: int, rail: int) -> str:
        return f"10.213.{rail}.{node + 1}"

    def rate_of(self, node: int) -> float:
        return self.slow_nodes.get(node, self.link_rate_bps)

    def goodput(self, node: int) -> float:
        """Payload bytes per second one NIC of this node carries each way."""
        return goodput_bytes_per_s(self.rate_of(node), self.mtu)

    def namespaces(self) -> list[str]:
        return [self.switch, *(self.namespace(i) for i in range(self.nodes))]

    def node_of_address(self) -> dict[str, int]:
        """Rail-0 address -> node index: what a launcher's host list names."""
        return {self.address(i, 0): i for i in range(self.nodes)}

    def qdisc(self, node: int) -> list[str]:
        """tc arguments after `qdisc add dev DEV root` for every NIC of this node (both ends)."""
        return [
            "tbf",
            "rate",
            f"{int(self.rate_of(node))}bit",
            "burst",
            str(TBF_BURST_BYTES),
            "latency",
            f"{TBF_LATENCY_MS}ms",
        ]

    def ground_truth(self, launcher: str, launch_settings: Mapping[str, str]) -> dict:
        """The emulated topology for meta.json: what the true answer is for this run."""
        return {
            "kind": "netns",
            "launcher": launcher,
            "nodes": self.nodes,
            "ranks_per_node": self.ranks_per_node,
            "nic_per_rank": True,
            "hosts": [self.hostname(i) for i in range(self.nodes)],
            "addresses": [
                [self.address(i, r) for r in range(self.ranks_per_node)] for i in range(self.nodes)
            ],
            "link_rate_bps": self.link_rate_bps,
            "link_rate": format_rate(self.link_rate_bps),
            "node_rate_bps": [self.rate_of(i) for i in range(self.nodes)],
            "slow_nodes": {str(i): r for i, r in sorted(self.slow_nodes.items())},
            "expected_goodput_GBps": [self.goodput(i) / 1e9 for i in range(self.nodes)],
            "mtu": self.mtu,
            "qdisc": {
                "kind": "tbf",
                "burst_bytes": TBF_BURST_BYTES,
                "latency_ms": TBF_LATENCY_MS,
                "where": "egress of every NIC and of its switch port (both directions)",
            },
            "sysctls": dict(NODE_SYSCTLS),
            "launch_settings": dict(launch_settings),
        }
