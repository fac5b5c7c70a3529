"""Build and tear down an emulated cluster with `ip` and `tc` (root only).

Nothing is created in the caller's namespace: the bridge lives in a switch namespace, each veth
pair is made there with its node end moved straight into the node's namespace, and deleting the
namespaces removes every link and qdisc with them. Teardown first kills what still runs inside
the namespaces, so a crashed job leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from commbench.emulate.topology import (
    NODE_SYSCTLS,
    RULE_TABLE_BASE,
    SUBNET,
    EmulatedCluster,
)
from commbench.errors import UsageError

TOOLS = ("ip", "tc", "unshare", "sysctl", "hostname")
COMMAND_TIMEOUT_S = 30


class EmulationError(RuntimeError):
    """A system command that builds the cluster failed (the cluster is torn down)."""


def check_privileges(euid: int | None = None, which=shutil.which) -> None:
    """Root and the tools, or one clear usage error (exit 2) before anything is created."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise UsageError(
            "emulate builds network namespaces, veth links and tc qdiscs: it must run as root"
        )
    missing = [t for t in TOOLS if which(t) is None]
    if missing:
        raise UsageError(
            f"emulate needs {', '.join(missing)} (iproute2, util-linux, procps), not found on PATH"
        )


def setup_commands(c: EmulatedCluster) -> list[list[str]]:
    """Every command that builds `c`, in order (pure, so a test can read it)."""
    sw = c.switch
    cmds = [
        ["ip", "netns", "add", sw],
        ["ip", "-n", sw, "link", "add", "br0", "type", "bridge"],
        ["ip", "-n", sw, "link", "set", "br0", "up"],
    ]
    for node in range(c.nodes):
        ns = c.namespace(node)
        cmds += [
            ["ip", "netns", "add", ns],
            ["ip", "-n", ns, "link", "set", "lo", "up"],
            ["ip", "netns", "exec", ns, "sysctl", "-q", "-w"]
            + [f"{k}={v}" for k, v in NODE_SYSCTLS.items()],
        ]
        for rail in range(c.ranks_per_node):
            nic, port, addr = c.nic(rail), c.port(node, rail), c.address(node, rail)
            table = str(RULE_TABLE_BASE + rail)
            cmds += [
                ["ip", "-n", sw, "link", "add", port, "mtu", str(c.mtu), "type", "veth"]
                + ["peer", "name", nic, "mtu", str(c.mtu), "netns", ns],
                ["ip", "-n", sw, "link", "set", port, "master", "br0", "up"],
                ["ip", "-n", ns, "addr", "add", f"{addr}/16", "dev", nic],
                ["ip", "-n", ns, "link", "set", nic, "up"],
                # unbound sockets leave by the destination's rail; bound ones by their own NIC
                ["ip", "-n", ns, "route", "add", f"10.213.{rail}.0/24", "dev", nic, "src", addr],
                ["ip", "-n", ns, "rule", "add", "from", addr, "table", table],
                ["ip", "-n", ns, "route", "add", SUBNET, "dev", nic, "src", addr, "table", table],
                ["tc", "-n", ns, "qdisc", "add", "dev", nic, "root", *c.qdisc(node)],
                ["tc", "-n", sw, "qdisc", "add", "dev", port, "root", *c.qdisc(node)],
            ]
    return cmds


def _run(cmd: list[str]) -> None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        raise EmulationError(f"{' '.join(cmd)}: {e}") from e
    if out.returncode:
        why = (out.stderr or out.stdout).strip().splitlines()
        raise EmulationError(f"{' '.join(cmd)}: {why[-1] if why else f'exit {out.returncode}'}")


def create(c: EmulatedCluster) -> None:
    """Build the cluster; on any failure tear down what was made and raise EmulationError."""
    if set(c.namespaces()) & set(list_namespaces()):
        raise EmulationError(f"namespaces {c.tag}* already exist")
    try:
        for cmd in setup_commands(c):
            _run(cmd)
    except BaseException:
        destroy(c)
        raise


def list_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def _pids_in(ns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10)
    return [int(p) for p in out.stdout.split() if p.isdigit()]


def kill_inside(c: EmulatedCluster, sig: int = signal.SIGKILL) -> int:
    """Signal every process still running in the cluster's namespaces; how many there were."""
    present = set(list_namespaces())
    pids = [p for ns in c.namespaces() if ns in present for p in _pids_in(ns)]
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return len(pids)


def destroy(c: EmulatedCluster) -> None:
    """Kill what runs inside, delete the namespaces (their links and qdiscs go with them)."""
    for _ in range(50):  # a bounded wait for killed processes to leave the namespaces
        if not kill_inside(c):
            break
        time.sleep(0.05)
    present = set(list_namespaces())
    for ns in c.namespaces():
        if ns in present:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
