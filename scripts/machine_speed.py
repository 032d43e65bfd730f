"""How fast this machine runs the two kinds of work the test suite is made of, in one line.

`make test` prints it first, so a wall time read from its log can be set beside the speed of the
machine that produced it: the suite's 12-minute target was met on 2-core machines where these
figures were several times better than on others the same suite ran on (docs/notes.md).

- python: CPU seconds for a fixed pure-Python loop (3 x 10^6 additions), the interpreter-bound
  share (imports, TRL's and MLflow's Python code, the platform's own);
- matmul: GFLOP/s of float32 512 x 512 matrix products on one thread, the kernel-bound share;
- with --imports, the CPU seconds a fresh process spends importing the training stack
  (``grpolab.experiment.runner``), the cost every training subprocess pays before its first step.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time


def python_loop_cpu_s(n: int = 3_000_000, repeats: int = 3) -> float:
    """Best of ``repeats`` CPU times for ``n`` integer additions in a Python loop."""
    best = float("inf")
    for _ in range(repeats):
        start, total = time.process_time(), 0
        for i in range(n):
            total += i
        best = min(best, time.process_time() - start)
    return best


def matmul_gflops(size: int = 512, products: int = 50) -> float:
    """Single-thread float32 GFLOP/s: 2 * size^3 flops per product, best of three batches."""
    import torch
    torch.set_num_threads(1)
    a = torch.randn(size, size)
    a @ a
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(products):
            a @ a
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 * products / best / 1e9


def stack_import_cpu_s() -> float:
    """CPU seconds (user + sys) of a fresh interpreter that imports the training stack."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import grpolab.experiment.runner"], check=True, env=os.environ)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imports", action="store_true", help="also time a fresh import of the training stack")
    args = parser.parse_args()
    figures = [f"python loop {python_loop_cpu_s():.2f} CPU-s", f"matmul {matmul_gflops():.1f} GFLOP/s (1 thread)"]
    if args.imports:
        figures.append(f"training-stack import {stack_import_cpu_s():.1f} CPU-s")
    print(f"machine speed ({os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}): " + ", ".join(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
