"""Launch a commbench command across an emulated cluster: mpirun or one torchrun per node.

mpirun runs inside node 0 and reaches the other nodes through a launch agent (Open MPI's
`plm_ssh_agent`, given a script that enters the node's namespace instead of ssh-ing). Three
Open MPI settings make MPI cross the emulated links at their rate (measured, docs/design.md):
- `--bind-to none`: every node sees the same cores, so per-node core binding pins ranks of
  different nodes to one core, where busy-polling peers wait a scheduler tick (4 ms) per message;
- the TCP eager limit raised above the largest message: with rendezvous, the receiver's
  acknowledgement queues behind its own bulk data on the shared socket, so two ranks exchanging
  at once take turns (half the bandwidth);
- each rank's TCP traffic on its own NIC (`btl_tcp_if_include`, set per local rank).
For gloo, torchrun per node with a static rendezvous at node 0 and `GLOO_SOCKET_IFNAME` per rank.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from commbench.emulate.topology import EmulatedCluster
from commbench.errors import UsageError
from commbench.measure.launch import ENV_STATUS_DIR

EAGER_LIMIT = 256 << 20  # above what a sweep sends at emulated rates (256 MiB at 400 Mbit/s: 5 s)
MPI_SETTINGS = {
    "mpi_yield_when_idle": "1",
    # emulated nodes meet over kernel TCP; Open MPI 5.0's libfabric BTL would only sleep 1 s
    # as it closes, in every rank's MPI_Init (opal/mca/btl/ofi/btl_ofi_component.c)
    "btl": "^ofi",
    "btl_tcp_eager_limit": str(EAGER_LIMIT),
    "btl_tcp_rndv_eager_limit": str(EAGER_LIMIT),
    "btl_tcp_max_send_size": str(EAGER_LIMIT),
}
MASTER_PORT = 29533
ENV_TOPOLOGY = "COMMBENCH_EMULATION"
GRACE_S = 10.0  # after a stop signal or a failed node, how long ranks get to finish writing


@dataclass(frozen=True)
class Job:
    """The processes to start (one argv per launcher) and the ground truth they report."""

    argvs: list[list[str]]
    env: dict[str, str]
    truth: dict
    stop_signal: int  # graceful stop: mpirun forwards SIGUSR1 to ranks; torchrun, SIGTERM
    status_dir: Path  # each rank leaves its exit status here (launch.exit_status_file)
    ranks: int


def find_launcher(name: str) -> str:
    """mpirun/torchrun beside this Python (a venv), else on PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise UsageError(
            f"emulate --backend needs {name}, not found beside {sys.executable} or on PATH"
        )
    return found


def agent_script(c: EmulatedCluster) -> str:
    """Open MPI's launch agent: `agent [ssh options] HOST COMMAND` runs COMMAND on that node."""
    cases = "\n".join(
        f"  {addr}) ns={c.namespace(i)}; name={c.hostname(i)} ;;"
        for addr, i in c.node_of_address().items()
    )
    return f"""#!/bin/sh
# commbench emulate: enter an emulated node instead of ssh-ing to a host
while [ "${{1#-}}" != "$1" ]; do shift; done
host=$1; shift
case $host in
{cases}
  *) echo "commbench emulate: no emulated node $host" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$1" && shift && exec /bin/sh -c "$*"' sh "$name" "$@"
"""


RANK_WRAPPER = """#!/bin/sh
# commbench emulate: each rank's traffic on its own NIC (local rank r owns eth<r>)
r=${OMPI_COMM_WORLD_LOCAL_RANK:-${LOCAL_RANK:-0}}
export OMPI_MCA_btl_tcp_if_include=eth$r GLOO_SOCKET_IFNAME=eth$r
exec "$@"
"""


def _enter(c: EmulatedCluster, node: int) -> list[str]:
    """Prefix that runs a command inside `node` under its own hostname."""
    inner = 'hostname "$1" && shift && exec "$@"'
    return ["ip", "netns", "exec", c.namespace(node), "unshare", "--uts"] + [
        "/bin/sh",
        "-c",
        inner,
        "sh",
        c.hostname(node),
    ]


def commbench_argv(command: list[str]) -> list[str]:
    return [sys.executable, "-m", "commbench", *command]


def mpi_job(c: EmulatedCluster, command: list[str], workdir: Path) -> Job:
    """mpirun in node 0, the other nodes through the agent, R slots per node."""
    agent, wrapper, hostfile = workdir / "agent.sh", workdir / "rank.sh", workdir / "hosts"
    agent.write_text(agent_script(c))
    wrapper.write_text(RANK_WRAPPER)
    for f in (agent, wrapper):
        f.chmod(0o755)
    hostfile.write_text(
        "".join(f"{addr} slots={c.ranks_per_node}\n" for addr in c.node_of_address())
    )
    mca = {"plm_ssh_agent": str(agent), **MPI_SETTINGS}
    argv = [find_launcher("mpirun"), "--hostfile", str(hostfile), "-n", str(c.world)]
    argv += ["--map-by", "slot", "--bind-to", "none"]
    for key, value in mca.items():
        argv += ["--mca", key, value]
    settings = {"bind_to": "none", **{f"mca:{k}": v for k, v in MPI_SETTINGS.items()}}
    truth = c.ground_truth("mpirun", settings)
    env = _job_env(truth, workdir)
    # emulate runs as root (namespaces need it); Open MPI refuses root unless told twice
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for name in sorted(k for k in env if k.startswith(("COMMBENCH_", "PYTHON"))):
        argv += ["-x", name]
    argv += [str(wrapper), *commbench_argv(command)]
    return Job([_enter(c, 0) + argv], env, truth, signal.SIGUSR1, _status_dir(workdir), c.world)


def gloo_job(c: EmulatedCluster, command: list[str], workdir: Path) -> Job:
    """One torchrun per node, static rendezvous at node 0's first NIC."""
    wrapper = workdir / "rank.sh"
    wrapper.write_text(RANK_WRAPPER)
    wrapper.chmod(0o755)
    torchrun = find_launcher("torchrun")
    settings = {"rendezvous": f"{c.address(0, 0)}:{MASTER_PORT}", "socket_ifname": "eth<r>"}
    truth = c.ground_truth("torchrun", settings)
    argvs = [
        _enter(c, node)
        + [torchrun, "--nnodes", str(c.nodes), "--nproc-per-node", str(c.ranks_per_node)]
        + ["--node-rank", str(node), "--master-addr", c.address(0, 0)]
        + ["--master-port", str(MASTER_PORT), "--no-python", str(wrapper)]
        + commbench_argv(command)
        for node in range(c.nodes)
    ]
    return Job(
        argvs, _job_env(truth, workdir), truth, signal.SIGTERM, _status_dir(workdir), c.world
    )


def _status_dir(workdir: Path) -> Path:
    return workdir / "status"


def _job_env(truth: dict, workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])  # commbench runs from here on every node
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    env[ENV_TOPOLOGY] = json.dumps(truth, separators=(",", ":"))
    env[ENV_STATUS_DIR] = str(_status_dir(workdir))
    return env


def describe(job: Job) -> str:
    return "\n".join(shlex.join(a) for a in job.argvs)


def run(job: Job) -> int:
    """Start every launcher; the first to fail (or a stop signal) ends the others.

    Returns the job's exit status: 0, the failing launcher's status, or 130 on Ctrl-C. A
    launcher that dies by a signal after every rank left its status reports the ranks' status.
    """
    job.status_dir.mkdir(exist_ok=True)
    procs = [subprocess.Popen(a, env=job.env, start_new_session=True) for a in job.argvs]
    stopped: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopped.append(signum)

    saved = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = 0
        while any(p.poll() is None for p in procs):
            failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
            if stopped or failed:
                status = 130 if stopped else failed[0]
                _stop(procs, job.stop_signal)
                break
            time.sleep(0.05)
        codes = [p.wait() for p in procs]
        if status == 0:
            status = next((rc for rc in codes if rc), 0)
        status = 128 + abs(status) if status < 0 else status
        if status > 128 and not stopped:
            return _ranks_status(job, status)
        return status
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def _ranks_status(job: Job, launcher_status: int) -> int:
    """The ranks' own status (the first non-zero, by rank) if every rank left one, else the
    launcher's: a launcher that crashed tearing down does not overrule what its ranks decided."""
    left = sorted(job.status_dir.glob("rank*.status"), key=lambda f: int(f.stem[4:]))
    if len(left) < job.ranks:
        return launcher_status
    codes = [int(f.read_text()) for f in left]
    status = next((rc for rc in codes if rc), 0)
    print(
        f"commbench emulate: the launcher ended with status {launcher_status} after all "
        f"{job.ranks} ranks had exited; their status: {status}",
        file=sys.stderr,
        flush=True,
    )
    return status


def _stop(procs: list[subprocess.Popen], sig: int) -> None:
    """Ask every launcher's process group to stop, then kill what is left after GRACE_S."""
    for p in procs:
        if p.poll() is None:
            _killpg(p, sig)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            _killpg(p, signal.SIGKILL)


def _killpg(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass
