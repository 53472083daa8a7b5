"""Runs a function on N local ranks (torch.multiprocessing; gloo + CPU, or NCCL + CUDA where available)
and returns what each rank returned: the local launcher of kiwi.torch.parallel, for tests and single-
host runs (torchrun works as well: parallelize only needs the default process group)."""
import os
import pickle
import sys
import tempfile
from typing import Any, Callable, List, Sequence

import torch.distributed as dist
import torch.multiprocessing as mp

from kiwi.torch.distributed.launcher import free_port, init_rank, pick_backend, rank_environment


def _spawned(rank: int, world: int, port: int, backend: str, fn: Callable, args: Sequence[Any], out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    init_rank(rank, world, backend, rank)
    try:
        result = fn(rank, world, *args)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)
    # as kiwi.torch.distributed's launcher: skip the interpreter's teardown (torch 2.13's gloo can abort there)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_local(fn: Callable, nproc: int, *args: Any, backend: str = "auto", allocator: str = "caching") -> List[Any]:
    """fn(rank, world, *args) on `nproc` processes of one process group (fn and args must pickle);
    returns their results in rank order."""
    backend = pick_backend(backend)
    with tempfile.TemporaryDirectory(prefix="kiwi-parallel-") as tmp, rank_environment(backend, allocator):
        mp.spawn(_spawned, args=(nproc, free_port(), backend, fn, args, tmp), nprocs=nproc, join=True)
        results = []
        for rank in range(nproc):
            with open(os.path.join(tmp, f"rank{rank}.pkl"), "rb") as f:
                results.append(pickle.load(f))
        return results
