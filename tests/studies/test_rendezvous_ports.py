"""The launcher owns a multi-process row's rendezvous port (studies/ranks.py): rows started at the
same moment each get their own port and all form their process group.

Tested at the layer ranks.py exposes for it (start_processes: the rank launch and rendezvous of
a row, without the training), with real gloo process groups on CPU: full rows of two ranks each
would train a model per rank for what these ranks check in one all_reduce. Five rows start at
once, twice: 10 row launches, each meeting four others at the same moment (ten pairs a round, 20 in
all), from 20 rank processes (each pays torch's import)."""

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


ROWS = "abcde"


def start_row(prefix: Path, all_ready: threading.Barrier, held: dict) -> int:
    """One row's launch: its two ranks rendezvous and all_reduce; returns the row's port."""
    all_ready.wait()
    procs = ranks.start_processes(2, [sys.executable, "-c", RANK, str(prefix)])
    with socket.socket() as probe:   # the port is held from before the ranks start until they are done
        try:
            probe.bind(("127.0.0.1", procs.port))
        except OSError as exc:
            held[prefix.name] = exc.errno
    codes = [p.wait(timeout=300) for p in procs]
    assert codes == [0, 0], f"{prefix.name}: rank exit codes {codes}"
    return procs.port


@pytest.mark.parametrize("round_", range(2))
def test_rows_started_at_once_each_get_their_own_port(tmp_path, round_):
    all_ready, held = threading.Barrier(len(ROWS)), {}
    with ThreadPoolExecutor(len(ROWS)) as pool:
        ports = list(pool.map(lambda name: start_row(tmp_path / name, all_ready, held), ROWS))
    assert len(set(ports)) == len(ROWS), ports
    assert held == {name: errno.EADDRINUSE for name in ROWS}
    for name, port in zip(ROWS, ports):
        for rank in (0, 1):
            assert (tmp_path / f"{name}-rank{rank}").read_text() == f"{port} 3 2"   # 1 + 2 over a group of 2
