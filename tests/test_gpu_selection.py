"""Backend selection, GPU choice, rendezvous address and timeouts for the torch backends:
pure logic, so the GPU path's decisions are tested on any host."""

from __future__ import annotations

import pytest

from commbench.errors import UsageError
from commbench.measure.launch import LaunchInfo
from commbench.measure.transport import resolve_backend
from commbench.measure.transport.devices import (
    TorchBuild,
    device_problem,
    gpu_index,
    nccl_problem,
    parse_torch_version,
    torch_build,
    visible_gpus,
)
from commbench.measure.transport.rendezvous import (
    choose_address,
    interface_addresses,
    process_group_timeout_s,
)

CUDA = TorchBuild("2.13.0", "12.8")
CPU = TorchBuild("2.13.0+cpu", None)


def launch(local_size=2, size=2, local_rank=0, launcher="openmpi"):
    return LaunchInfo(launcher, local_rank, size, local_rank, local_size, "node1")


def test_torch_version_file_says_whether_it_is_a_cuda_build():
    cpu = "__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n"
    assert parse_torch_version(cpu) == TorchBuild("2.13.0+cpu", None)
    gpu = "__version__ = '2.5.1+cu124'\ndebug = False\ncuda: Optional[str] = '12.4'\n"
    assert parse_torch_version(gpu) == TorchBuild("2.5.1+cu124", "12.4")
    assert parse_torch_version("__version__ = '2.1.0'\ncuda = '11.8'\n").cuda == "11.8"
    assert torch_build().version is not None  # this environment has torch (a CPU build)


def test_visible_gpus_counts_device_nodes_and_honours_cuda_visible_devices(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    assert visible_gpus({}, tmp_path) == 3
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1"}, tmp_path) == 1
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,2"}, tmp_path) == 2
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, tmp_path) == 0
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, tmp_path) == 0
    assert visible_gpus({}, tmp_path / "missing") == 0


def test_nccl_needs_a_cuda_torch_a_gpu_and_one_gpu_per_local_rank():
    assert nccl_problem(launch(2), CUDA, 8) is None
    assert "torch 2.13.0+cpu is a CPU build" in nccl_problem(launch(2), CPU, 8)
    assert "needs torch" in nccl_problem(launch(2), TorchBuild(None, None), 8)
    assert "none is visible" in nccl_problem(launch(2), CUDA, 0)
    two_on_one = nccl_problem(launch(2), CUDA, 1)
    assert "2 ranks on host node1 share 1 visible GPU(s)" in two_on_one
    assert "at most 1 ranks per host" in two_on_one
    assert device_problem(launch(2), True, 2, True) is None
    assert "is_available() is False" in device_problem(launch(2), False, 0, True)
    assert "no NCCL" in device_problem(launch(2), True, 2, False)
    assert "share 1 GPU(s)" in device_problem(launch(2), True, 1, True)


def test_each_local_rank_gets_its_own_gpu_never_a_shared_one():
    assert [gpu_index(launch(4, 8, r), 4) for r in range(4)] == [0, 1, 2, 3]
    with pytest.raises(UsageError, match="4 ranks on host node1 share 2 GPU"):
        gpu_index(launch(4, 8, 3), 2)  # the old local_rank % count put ranks 1 and 3 together


def test_auto_never_picks_nccl_with_a_cpu_build_of_torch(monkeypatch):
    import commbench.measure.transport as transport

    monkeypatch.setattr(transport, "visible_gpus", lambda: 8)  # a GPU host...
    monkeypatch.setattr(transport, "torch_build", lambda: CPU)  # ...with the CPU wheel
    assert resolve_backend("auto", launch()) == "mpi"
    assert resolve_backend("auto", launch(launcher="torchrun")) == "gloo"
    with pytest.raises(UsageError, match="CPU build"):
        resolve_backend("nccl", launch())
    monkeypatch.setattr(transport, "torch_build", lambda: CUDA)
    assert resolve_backend("auto", launch()) == "nccl"
    monkeypatch.setattr(transport, "visible_gpus", lambda: 1)  # two ranks, one GPU
    assert resolve_backend("auto", launch()) == "mpi"
    with pytest.raises(UsageError, match="share 1 visible GPU"):
        resolve_backend("nccl", launch())


IFACES = [("lo", "127.0.0.1"), ("docker0", "172.17.0.1"), ("eth0", "10.0.0.5"), ("ib0", "10.1.0.5")]


def test_rendezvous_address_follows_the_socket_interface_variables():
    assert choose_address(IFACES, {}, spans_hosts=True) == "172.17.0.1"  # first non-loopback
    assert choose_address(IFACES, {"NCCL_SOCKET_IFNAME": "ib"}, True) == "10.1.0.5"
    assert choose_address(IFACES, {"GLOO_SOCKET_IFNAME": "eth0"}, True) == "10.0.0.5"
    assert choose_address(IFACES, {"NCCL_SOCKET_IFNAME": "^docker,lo"}, True) == "10.0.0.5"
    assert choose_address(IFACES, {"NCCL_SOCKET_IFNAME": "=eth"}, False) == "127.0.0.1"
    both = {"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "eth0"}
    assert choose_address(IFACES, both, True) == "10.1.0.5"  # NCCL's wins, as NCCL reads it
    assert choose_address(IFACES, {"MASTER_ADDR": "node7"}, True) == "node7"


def test_rendezvous_refuses_loopback_when_the_job_spans_hosts():
    only_lo = [("lo", "127.0.0.1")]
    assert choose_address(only_lo, {}, spans_hosts=False) == "127.0.0.1"
    with pytest.raises(UsageError, match="spans hosts but no non-loopback"):
        choose_address(only_lo, {}, spans_hosts=True)
    with pytest.raises(UsageError, match="matching NCCL_SOCKET_IFNAME='ib'"):
        choose_address(IFACES[:3], {"NCCL_SOCKET_IFNAME": "ib"}, spans_hosts=True)


def test_this_hosts_interfaces_include_loopback():
    assert ("lo", "127.0.0.1") in interface_addresses()


def test_torch_timeout_is_a_margin_above_the_watchdog():
    for watchdog in (1.0, 30.0, 300.0, 3600.0):
        torch_s = process_group_timeout_s(watchdog)
        assert torch_s >= watchdog + 60 and torch_s >= 1.5 * watchdog
