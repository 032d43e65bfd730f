"""The launcher owns a multi-process row's rendezvous port (studies/ranks.py): two rows started at
the same moment each get their own port and both form their process group.

Tested at the layer ranks.py exposes for it (start_processes: the rank launch and rendezvous of
a row, without the training), with real gloo process groups on CPU: ten full rows of two ranks
each would train twenty models for what these ranks check in one all_reduce."""

import errno
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grpolab.studies import ranks

RANK = """
import os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
with open(f"{sys.argv[1]}-rank{dist.get_rank()}", "w") as out:
    out.write(f"{os.environ['MASTER_PORT']} {total.item():g} {dist.get_world_size()}")
dist.destroy_process_group()
"""


def start_row(prefix: Path, both_ready: threading.Barrier, held: dict) -> int:
    """One row's launch: its two ranks rendezvous and all_reduce; returns the row's port."""
    both_ready.wait()
    procs = ranks.start_processes(2, [sys.executable, "-c", RANK, str(prefix)])
    with socket.socket() as probe:   # the port is held from before the ranks start until they are done
        try:
            probe.bind(("127.0.0.1", procs.port))
        except OSError as exc:
            held[prefix.name] = exc.errno
    codes = [p.wait(timeout=300) for p in procs]
    assert codes == [0, 0], f"{prefix.name}: rank exit codes {codes}"
    return procs.port


@pytest.mark.parametrize("round_", range(10))
def test_two_rows_started_at_once_each_get_their_own_port(tmp_path, round_):
    both_ready, held = threading.Barrier(2), {}
    with ThreadPoolExecutor(2) as pool:
        ports = list(pool.map(lambda name: start_row(tmp_path / name, both_ready, held), ["a", "b"]))
    assert ports[0] != ports[1]
    assert held == {"a": errno.EADDRINUSE, "b": errno.EADDRINUSE}
    for name, port in zip("ab", ports):
        for rank in (0, 1):
            assert (tmp_path / f"{name}-rank{rank}").read_text() == f"{port} 3 2"   # 1 + 2 over a group of 2
