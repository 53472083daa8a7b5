"""FSDP2's all-gather and reduce-scatter on gloo as in-place all-reduces (kiwi.torch.parallel.gloo_comms):
the results of gloo's own collectives, no allocation of the buffer's size while they run (gloo's own
allocate one and may free it on its thread, unseen by the profiler), the buffer freed on the caller's
thread when it drops it, and the bytes counted as the collectives they stand for."""
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from kiwi.torch.parallel.collectives import CollectiveBytes
from kiwi.torch.parallel.gloo_comms import InPlaceAllGather, InPlaceReduceScatter
from kiwi.torch.parallel.local_run import run_local

N = 1 << 14  # floats in one rank's shard


def _recorded(fn):
    """fn() under the profiler: the bytes of every allocation and free it records, in order."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return [e.nbytes() for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]


def _rank(rank, world):
    group = dist.group.WORLD
    shard = torch.arange(N, dtype=torch.float32) + rank * N
    expected = torch.empty(world * N)
    dist.all_gather_into_tensor(expected, shard)
    gathered = torch.empty(world * N)
    gathered.view(world, N)[rank].copy_(shard)  # FSDP2 copies its shard into its slot first
    with CollectiveBytes({"dp": [group]}) as counted:
        gather_events = _recorded(lambda: InPlaceAllGather()(gathered, gathered.view(world, N)[rank], group))

    grads = torch.arange(world * N, dtype=torch.float32) * (rank + 1)
    reference = torch.empty(N)
    dist.reduce_scatter_tensor(reference, grads.clone(), op=dist.ReduceOp.AVG)
    reduced = torch.empty(N)
    with CollectiveBytes({"dp": [group]}) as counted_rs:
        scatter_events = _recorded(lambda: InPlaceReduceScatter()(reduced, grads, group, dist.ReduceOp.AVG))

    # the buffer a collective ran on is freed here, when the caller drops it: the profiler sees it go
    out = torch.empty(N)

    def run_and_drop():
        buffer = torch.ones(world * N)
        InPlaceReduceScatter()(out, buffer, group, dist.ReduceOp.SUM)
        del buffer
    freed = _recorded(run_and_drop)
    return (torch.equal(gathered, expected), torch.allclose(reduced, reference), gather_events, scatter_events,
            counted.bytes, counted_rs.bytes, freed)


def test_in_place_collectives_match_gloos_allocate_nothing_and_count_as_what_they_stand_for():
    world = 4
    for equal, close, gather_events, scatter_events, gathered_bytes, scattered_bytes, freed in \
            run_local(_rank, world, backend="gloo"):
        assert equal and close
        buffer = world * N * 4
        assert all(abs(b) < buffer for b in gather_events + scatter_events), (gather_events, scatter_events)
        assert gathered_bytes == {("dp", "all_gather"): buffer}
        assert scattered_bytes == {("dp", "reduce_scatter"): buffer}
        assert buffer in freed and -buffer in freed and sum(freed) == 0, freed
