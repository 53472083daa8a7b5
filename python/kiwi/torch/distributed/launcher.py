"""Starts the ranks of a plan: torch.multiprocessing on one host, or one rank per process under
torchrun-style environment variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK).
NCCL + CUDA when available, gloo + CPU otherwise; one intra-op thread per rank on CPU, and (unless
allocator="system") glibc told to keep freed memory, as the CUDA caching allocator kiwi models does."""
import contextlib
import datetime
import inspect
import json
import os
import socket
import sys
import tempfile
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kiwi.torch import caching_allocator
from kiwi.torch.distributed.model import GptConfig
from kiwi.torch.distributed.plan import HybridPlan
from kiwi.torch.distributed.trainer import TrainOptions, train_rank


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pick_backend(requested: str = "auto") -> str:
    if requested != "auto":
        return requested
    return "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"


def init_rank(rank: int, world: int, backend: str, local_rank: int) -> None:
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        if hasattr(torch, "set_default_device"):
            torch.set_default_device(f"cuda:{local_rank}")
        else:
            torch.set_default_tensor_type(torch.cuda.FloatTensor)
    else:
        torch.set_num_threads(1)
    # NCCL: the rank's GPU named, so that neither barriers nor the communicator guess it from the rank (PyTorch
    # warns that a guess can hang where ranks do not map to GPUs in order; seen on an H200)
    named = backend == "nccl" and "device_id" in inspect.signature(dist.init_process_group).parameters  # torch >= 2.3
    device = {"device_id": torch.device("cuda", local_rank)} if named else {}
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=300), **device)


def run_one_rank(rank: int, world: int, local_rank: int, backend: str, plan: HybridPlan, config: GptConfig,
                 options: TrainOptions, reference: Optional[Dict[str, Any]]) -> Optional[List[Dict[str, Any]]]:
    """Runs this rank; returns every rank's result on rank 0 (None elsewhere)."""
    init_rank(rank, world, backend, local_rank)
    try:
        result = train_rank(plan, config, options, rank, world, reference)
        gathered: List[Any] = [None] * world
        dist.all_gather_object(gathered, result)
        return gathered if rank == 0 else None
    finally:
        dist.destroy_process_group()


def _spawned(rank: int, world: int, port: int, backend: str, jobs, out_path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    init_rank(rank, world, backend, rank)
    try:
        all_results = []
        for plan, config, options, reference in jobs:  # several plans per launch: one process start-up
            result = train_rank(plan, config, options, rank, world, reference)
            gathered: List[Any] = [None] * world
            dist.all_gather_object(gathered, result)
            all_results.append(gathered)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        with open(out_path, "w", encoding="utf-8") as f:
            json.dump(all_results, f)
    # Skip the interpreter's teardown: with torch 2.13's gloo, about one run in three aborted there
    # ("terminate called without an active exception", a worker thread destroyed unjoined) after the
    # work was done, and mp.spawn failed the whole launch.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


ALLOCATORS = ("caching", "system")


@contextlib.contextmanager
def rank_environment(backend: str, allocator: str):
    """os.environ as the spawned ranks inherit it, restored afterwards."""
    if allocator not in ALLOCATORS:
        raise ValueError(f"allocator: '{allocator}': expected one of {', '.join(ALLOCATORS)}")
    extra = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    if backend == "gloo" and allocator == "caching":
        extra.update(caching_allocator.GLIBC_CACHING_ALLOCATOR)
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def launch_jobs(jobs: List[tuple], nproc: int, backend: str = "auto",
                allocator: str = "caching") -> List[List[Dict[str, Any]]]:
    """Runs (plan, config, options, reference-or-None) jobs one after the other on `nproc` local
    processes; returns, per job, each rank's result in rank order. On CPU the ranks run with glibc
    keeping freed memory (caching_allocator.py) unless `allocator` is "system"."""
    for plan, _, options, *_ in jobs:
        plan.check_world(nproc)
        plan.check_whole_layer_recomputation()
        plan.check_schedule(options.schedule)
    backend = pick_backend(backend)
    with tempfile.TemporaryDirectory(prefix="kiwi-dist-") as tmp, rank_environment(backend, allocator):
        out = os.path.join(tmp, "results.json")
        mp.spawn(_spawned, args=(nproc, free_port(), backend, jobs, out), nprocs=nproc, join=True)
        with open(out, "r", encoding="utf-8") as f:
            return json.load(f)


def launch(plan: HybridPlan, config: GptConfig, options: TrainOptions, nproc: int, backend: str = "auto",
           reference: Optional[Dict[str, Any]] = None, allocator: str = "caching") -> List[Dict[str, Any]]:
    """Runs the plan on `nproc` local processes and returns each rank's result (rank order)."""
    return launch_jobs([(plan, config, options, reference)], nproc, backend, allocator)[0]


def launch_from_env(plan: HybridPlan, config: GptConfig, options: TrainOptions,
                    backend: str = "auto") -> Optional[List[Dict[str, Any]]]:
    """torchrun-style: this process is one rank; returns all results on rank 0."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    plan.check_world(world)
    plan.check_whole_layer_recomputation()
    plan.check_schedule(options.schedule)
    return run_one_rank(rank, world, local_rank, pick_backend(backend), plan, config, options, None)
