"""Emulated nodes: the pure topology and launch lines, then real namespaces, links and jobs.

The second half needs root, iproute2 and tc (CI here runs as root); it builds real network
namespaces joined by shaped veth links and runs real mpirun and torchrun jobs across them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from commbench.commands.emulate import command_line
from commbench.emulate import jobs, netns
from commbench.emulate.topology import (
    ENV_TAG,
    EmulatedCluster,
    format_rate,
    goodput_bytes_per_s,
    parse_rate,
    parse_slow_node,
)
from commbench.errors import UsageError

from conftest import REPO, commbench_cmd, job_env, mpirun_path, needs_torch, run_single

# ---------------------------------------------------------------- pure: rates, names, commands


@pytest.mark.parametrize(
    ("text", "bps"),
    [("1gbit", 1e9), ("500mbit", 5e8), ("125mbps", 1e9), ("1.5gbit", 1.5e9), ("2e8bit", 2e8)],
)
def test_rates_in_tc_units(text, bps):
    assert parse_rate(text) == pytest.approx(bps)
    assert parse_rate(format_rate(bps)) == pytest.approx(bps)


@pytest.mark.parametrize("text", ["fast", "100", "0mbit", "500kbit", "1000gbit", "1 gbitt"])
def test_bad_rates_are_usage_errors(text):
    with pytest.raises(UsageError, match="link rate"):
        parse_rate(text)


def test_the_name_prefix_is_checked():
    assert EmulatedCluster(nodes=2, ranks_per_node=1, link_rate_bps=1e9, tag="cbx1").tag == "cbx1"
    with pytest.raises(UsageError, match="COMMBENCH_EMULATE_TAG"):
        EmulatedCluster(nodes=2, ranks_per_node=1, link_rate_bps=1e9, tag="my-cluster")


def test_slow_node_and_cluster_bounds():
    assert parse_slow_node("1=250mbit") == (1, 2.5e8)
    with pytest.raises(UsageError, match="NODE=RATE"):
        parse_slow_node("250mbit")
    with pytest.raises(UsageError, match="--nodes 1"):
        EmulatedCluster(nodes=1, ranks_per_node=2, link_rate_bps=1e9)
    with pytest.raises(UsageError, match="--ranks-per-node 0"):
        EmulatedCluster(nodes=2, ranks_per_node=0, link_rate_bps=1e9)
    with pytest.raises(UsageError, match="--slow-node 2"):
        EmulatedCluster(nodes=2, ranks_per_node=1, link_rate_bps=1e9, slow_nodes={2: 1e8})


def test_goodput_is_the_payload_share_of_each_frame():
    # 9000 B MTU: 8948 B of TCP payload per 9014 B frame that tbf counts
    assert goodput_bytes_per_s(1e9, 9000) == pytest.approx(1e9 / 8 * 8948 / 9014)
    assert goodput_bytes_per_s(1e9, 1500) == pytest.approx(1e9 / 8 * 1448 / 1514)


def test_every_nic_is_shaped_both_ways_and_nothing_touches_the_callers_namespace():
    c = EmulatedCluster(nodes=3, ranks_per_node=2, link_rate_bps=4e8, slow_nodes={2: 1e8})
    cmds = netns.setup_commands(c)
    qdiscs = [cmd for cmd in cmds if cmd[0] == "tc"]
    assert len(qdiscs) == 2 * c.nodes * c.ranks_per_node
    for node in range(c.nodes):
        rate = f"{int(c.rate_of(node))}bit"
        devs = {(q[2], q[6]) for q in qdiscs if q[q.index("rate") + 1] == rate}
        for rail in range(c.ranks_per_node):
            assert (c.namespace(node), c.nic(rail)) in devs
            assert (c.switch, c.port(node, rail)) in devs
    for cmd in cmds:  # every command names the namespace it acts in
        assert cmd[:3] == ["ip", "netns", "add"] or cmd[1] == "-n" or cmd[2] == "exec", cmd
    names = [c.port(n, r) for n in range(c.nodes) for r in range(c.ranks_per_node)]
    assert len(set(names)) == len(names) and max(map(len, names)) <= 15
    addrs = [c.address(n, r) for n in range(c.nodes) for r in range(c.ranks_per_node)]
    assert len(set(addrs)) == len(addrs)


def test_ground_truth_records_rates_and_goodput():
    c = EmulatedCluster(nodes=2, ranks_per_node=2, link_rate_bps=4e8, slow_nodes={1: 2e8})
    t = c.ground_truth("mpirun", {"bind_to": "none"})
    assert t["node_rate_bps"] == [4e8, 2e8]
    assert t["hosts"] == ["emu-node0", "emu-node1"]
    assert t["expected_goodput_GBps"][1] == pytest.approx(goodput_bytes_per_s(2e8) / 1e9)
    assert t["qdisc"]["kind"] == "tbf" and t["launch_settings"] == {"bind_to": "none"}
    json.dumps(t)


def test_mpirun_line_carries_the_settings_that_make_mpi_cross_at_the_rate(tmp_path):
    c = EmulatedCluster(nodes=2, ranks_per_node=2, link_rate_bps=4e8)
    job = jobs.mpi_job(c, ["run", "sendrecv"], tmp_path)
    (argv,) = job.argvs
    assert argv[:4] == ["ip", "netns", "exec", c.namespace(0)]
    line = " ".join(argv)
    assert "--bind-to none" in line and "mpi_yield_when_idle 1" in line
    assert f"btl_tcp_eager_limit {jobs.EAGER_LIMIT}" in line
    assert (tmp_path / "hosts").read_text().split() == [
        "10.213.0.1",
        "slots=2",
        "10.213.0.2",
        "slots=2",
    ]
    agent = (tmp_path / "agent.sh").read_text()
    assert f"10.213.0.2) ns={c.namespace(1)}; name=emu-node1" in agent
    assert json.loads(job.env[jobs.ENV_TOPOLOGY])["launcher"] == "mpirun"


def test_torchrun_line_per_node(tmp_path):
    c = EmulatedCluster(nodes=3, ranks_per_node=1, link_rate_bps=4e8)
    job = jobs.gloo_job(c, ["run", "pingpong"], tmp_path)
    assert len(job.argvs) == 3
    for node, argv in enumerate(job.argvs):
        assert argv[3] == c.namespace(node)
        assert argv[argv.index("--node-rank") + 1] == str(node)
        assert argv[argv.index("--master-addr") + 1] == "10.213.0.1"


@pytest.mark.parametrize(
    ("words", "message"),
    [
        ([], "got nothing"),
        (["--", "fit", "results/x"], "got 'fit'"),
        (["run", "allreduce", "--backend", "nccl"], "--backend nccl"),
        (["run", "allreduce", "--backend=nccl"], "--backend nccl"),
        (["suite", "smoke", "--ranks-per-node", "2"], "--ranks-per-node"),
    ],
)
def test_command_after_the_dashes_is_checked(words, message):
    with pytest.raises(UsageError, match=message):
        command_line(words, "mpi")


def test_torchrun_cannot_start_the_mpi_backend():
    with pytest.raises(UsageError, match="torchrun cannot run"):
        command_line(["run", "allreduce", "--backend", "mpi"], "gloo")


def test_command_line_keeps_a_matching_backend():
    assert command_line(["--", "run", "x", "--backend", "mpi"], "mpi") == [
        "run",
        "x",
        "--backend",
        "mpi",
    ]


def test_privileges_checked_before_anything_is_built():
    with pytest.raises(UsageError, match="must run as root"):
        netns.check_privileges(euid=1000)
    with pytest.raises(UsageError, match="tc"):
        netns.check_privileges(euid=0, which=lambda t: None if t == "tc" else "/bin/" + t)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_not_root_is_one_message_and_exit_2():
    if os.geteuid() != 0:
        cmd = commbench_cmd()
    else:  # drop to nobody for real
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *commbench_cmd()]
    args = ["emulate", "--nodes", "2", "--ranks-per-node", "1", "--link-rate", "1gbit"]
    p = subprocess.run(
        [*cmd, *args, "--", "run", "sendrecv"],
        capture_output=True,
        text=True,
        timeout=60,
        env=job_env(),
        cwd="/",
    )
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        "commbench: error: emulate builds network namespaces, veth links and tc qdiscs: "
        "it must run as root"
    ]


def test_bad_input_is_exit_2_before_anything_is_built():
    args = ("emulate", "--nodes", "2", "--ranks-per-node", "2", "--link-rate", "x")
    job = run_single(*args, "--", "run", "sendrecv")
    assert job.returncode == 2 and "link rate 'x'" in job.stderr
    assert "Traceback" not in job.output


# ---------------------------------------------------------------- real namespaces (root)

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or any(shutil.which(t) is None for t in netns.TOOLS),
    reason="emulated nodes need root and iproute2/tc/unshare",
)


TAG = f"cbt{os.getpid() % 100:02d}"  # this test session's emulations, apart from any other


def _system_state() -> dict[str, str]:
    """What the caller's namespace shows: links, qdiscs, and this session's namespaces (an
    emulation someone else runs meanwhile has its own tag)."""
    run = lambda *a: subprocess.run(a, capture_output=True, text=True, timeout=10).stdout  # noqa: E731
    links = [line.split(":")[1].strip() for line in run("ip", "-o", "link").splitlines()]
    ours = [ns for ns in netns.list_namespaces() if ns.startswith(TAG)]
    return {
        "netns": " ".join(sorted(ours)),
        "links": " ".join(sorted(links)),
        "qdiscs": run("tc", "qdisc", "show"),
    }


@needs_root
def test_build_and_teardown_leave_nothing_behind():
    before = _system_state()
    c = EmulatedCluster(
        nodes=2, ranks_per_node=2, link_rate_bps=3e8, slow_nodes={1: 1.5e8}, tag=TAG
    )
    netns.create(c)
    try:
        assert set(c.namespaces()) <= set(netns.list_namespaces())
        out = subprocess.run(
            ["tc", "-n", c.namespace(1), "-j", "qdisc", "show", "dev", "eth1"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        (tbf,) = [q for q in json.loads(out) if q["kind"] == "tbf"]
        assert tbf["options"]["rate"] * 8 == pytest.approx(1.5e8, rel=1e-3)
        # a process left running inside a node is killed by the teardown
        subprocess.Popen(["ip", "netns", "exec", c.namespace(0), "sleep", "60"])
        time.sleep(0.3)
        assert netns.kill_inside(c, signal.SIGCONT) == 1
    finally:
        netns.destroy(c)
    assert _system_state() == before


def _emulate(*args: str, timeout: float = 240, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        commbench_cmd("emulate", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=job_env({ENV_TAG: TAG, **(env or {})}),
        cwd=REPO,
        start_new_session=True,
    )


def _finish(p: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out + err


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]


RATE = "200mbit"
GOODPUT_GBPS = goodput_bytes_per_s(2e8) / 1e9


@needs_root
@pytest.mark.parametrize("op", ["pingpong", "sendrecv"])
def test_mpi_crosses_the_shaped_links_at_their_rate(tmp_path, op):
    """Inter pairs (strided, all at once, one rail each) within 10% of the shaped rate at 4 MiB;
    intra pairs (contiguous) far above it; link classes from the nodes' hostnames."""
    before = _system_state()
    rc, out = _finish(
        _emulate(
            *("--nodes", "2", "--ranks-per-node", "2", "--link-rate", RATE, "--"),
            *("run", op, "--sizes", "8,4M", "-n", "24", "-w", "1", "-g", "2"),
            *("--placement", "strided", "--results", str(tmp_path), "--run-id", "inter"),
        )
    )
    assert rc == 0, out
    small, large = _records(tmp_path / "inter")
    assert large["link_class"] == "inter" and large["hosts_spanned"] == 2
    assert large["busbw_GBps"] == pytest.approx(GOODPUT_GBPS, rel=0.10), out
    # no scheduler-tick wait (4 ms) on every message: with it even the fastest of 24 paid it
    assert small["time_min_us"] < 3000, out
    meta = json.loads((tmp_path / "inter" / "meta.json").read_text())
    assert meta["hosts"] == ["emu-node0", "emu-node1"] and meta["ranks_per_node_override"] is False
    assert meta["emulation"]["node_rate_bps"] == [2e8, 2e8]
    rc, out = _finish(
        _emulate(
            *("--nodes", "2", "--ranks-per-node", "2", "--link-rate", RATE, "--"),
            *("run", op, "--sizes", "4M", "-n", "4", "-w", "1", "-g", "2"),
            *("--results", str(tmp_path), "--run-id", "intra"),
        )
    )
    assert rc == 0, out
    (intra,) = _records(tmp_path / "intra")
    assert intra["link_class"] == "intra" and intra["busbw_GBps"] > 5 * GOODPUT_GBPS
    assert _system_state() == before


@needs_root
@needs_torch
def test_gloo_crosses_the_shaped_links_through_torchrun(tmp_path):
    rc, out = _finish(
        _emulate(
            *("--nodes", "2", "--ranks-per-node", "1", "--link-rate", RATE, "--backend", "gloo"),
            *("--", "run", "pingpong", "--sizes", "4M", "-n", "3", "-w", "1"),
            *("--results", str(tmp_path), "--run-id", "g"),
        )
    )
    assert rc == 0, out
    (rec,) = _records(tmp_path / "g")
    assert rec["backend"] == "gloo" and rec["link_class"] == "inter"
    assert rec["busbw_GBps"] == pytest.approx(GOODPUT_GBPS, rel=0.10), out
    meta = json.loads((tmp_path / "g" / "meta.json").read_text())
    assert meta["launcher"] == "torchrun" and meta["emulation"]["launcher"] == "torchrun"


@needs_root
@needs_torch
def test_mpirun_starts_gloo_with_a_rendezvous_the_other_node_reaches(tmp_path):
    """mpirun sets no MASTER_ADDR: rank 0 picks its own NIC's address, not loopback."""
    rc, out = _finish(
        _emulate(
            *("--nodes", "2", "--ranks-per-node", "1", "--link-rate", RATE, "--"),
            *("run", "pingpong", "--sizes", "4M", "-n", "3", "-w", "1", "--backend", "gloo"),
            *("--results", str(tmp_path), "--run-id", "mg"),
        )
    )
    assert rc == 0, out
    (rec,) = _records(tmp_path / "mg")
    assert rec["backend"] == "gloo" and rec["link_class"] == "inter"
    assert rec["busbw_GBps"] == pytest.approx(GOODPUT_GBPS, rel=0.10), out


@needs_root
def test_layout_groups_span_the_nodes_with_correct_data(tmp_path):
    """Every strategy of the smoke suite on 2 nodes x 2 ranks: TP inside a node, DP/PP across."""
    rc, out = _finish(
        _emulate(
            *("--nodes", "2", "--ranks-per-node", "2", "--link-rate", "400mbit", "--"),
            *("suite", "smoke", "--results", str(tmp_path), "--run-id", "s"),
        )
    )
    assert rc == 0, out
    recs = _records(tmp_path / "s")
    assert recs and all(r.get("wrong", 0) == 0 for r in recs)
    links = {r.get("link_class") for r in recs}
    assert {"intra", "inter"} <= links, links


@needs_root
def test_a_rank_killed_on_one_node_takes_the_job_down_and_points_stay(tmp_path):
    before = _system_state()
    rc, out = _finish(
        _emulate(
            *("--nodes", "2", "--ranks-per-node", "1", "--link-rate", "1gbit", "--"),
            *("run", "allreduce", "--sizes", "8,64,512,4K", "-n", "3", "-w", "1"),
            *("--results", str(tmp_path), "--run-id", "k", "--timeout", "30"),
            env={"COMMBENCH_FAULT": "rank=1,point=2,kind=sigkill"},
        ),
        timeout=120,
    )
    assert rc != 0, out
    assert [r["bytes"] for r in _records(tmp_path / "k")] == [8, 64]
    assert _system_state() == before


@needs_root
def test_ctrl_c_stops_the_job_and_tears_everything_down(tmp_path):
    before = _system_state()
    p = _emulate(
        *("--nodes", "2", "--ranks-per-node", "1", "--link-rate", "20mbit", "--"),
        *("run", "sendrecv", "--sizes", "8,512K,1M,1536K,2M,3M", "-n", "5", "-w", "1"),
        *("--results", str(tmp_path), "--run-id", "c"),
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "c" / "records.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(p.pid, signal.SIGINT)  # the terminal's Ctrl-C reaches the foreground group
    rc, out = _finish(p, timeout=60)
    assert rc == 130, out
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    assert meta["status"] == "interrupted", out
    assert _system_state() == before
    assert not [ns for ns in netns.list_namespaces() if ns.startswith(TAG)]


def _crashing_launcher(tmp_path, n: int, ranks: int, *args: str) -> jobs.Job:
    """Real mpirun with real ranks, then the launcher dies by SIGABRT, as Open MPI 5.0's
    prterun now and then does tearing down (a pthread mutex assertion, status 134)."""
    mpirun = [mpirun_path(), "-n", str(n), "--oversubscribe", "-x", "COMMBENCH_STATUS_DIR"]
    line = subprocess.list2cmdline([*mpirun, *commbench_cmd(*args)])
    status = tmp_path / "status"
    env = job_env({"COMMBENCH_STATUS_DIR": str(status)})
    return jobs.Job([["/bin/sh", "-c", f"{line}; kill -ABRT $$"]], env, {}, signal.SIGUSR1,
                    status, ranks)  # fmt: skip


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("n", "ranks", "args", "want"),
    [
        (2, 2, ("run", "allreduce", "-b", "8", "-e", "8", "-n", "2", "-w", "1"), 0),
        (1, 1, ("run", "allreduce", "-b", "3x"), 2),  # the ranks' usage error, not the crash
        (1, 2, ("run", "allreduce", "-b", "8", "-e", "8", "-n", "2", "-w", "1"), 134),
    ],
)
def test_a_launcher_crashing_after_every_rank_exited_reports_the_ranks_status(
    tmp_path, capfd, n, ranks, args, want
):
    """With a rank missing its status (n < ranks) the launcher's own 134 stands."""
    job = _crashing_launcher(tmp_path, n, ranks, *args, "--results", str(tmp_path))
    assert jobs.run(job) == want
    said = capfd.readouterr().err
    assert ("after all" in said) == (want != 134), said


def test_emulate_is_in_the_command_registry():
    job = run_single("emulate", "--help")
    assert job.returncode == 0 and "--link-rate" in job.stdout
