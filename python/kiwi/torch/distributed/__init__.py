"""Runs kiwi's layer-level hybrid plans (`kiwi hybrid`, Galvatron-BMW) on torch.distributed
(docs/distributed.md): per-layer DP (bucketed gradient all-reduce overlapped with backward), ZeRO-3,
Megatron TP and checkpointing, Slice-Gather between layers of different layouts, and 1F1B / GPipe
pipelines over send/recv. gloo + CPU here, NCCL + CUDA where available.

    python3 -m kiwi.torch.distributed --plan plan.json --nproc 4 --iterations 5
"""
from kiwi.torch.distributed.plan import HybridPlan, LayerStrategy, PlanError, load_plan, parse_plan
from kiwi.torch.distributed.model import GptConfig, full_parameters
from kiwi.torch.distributed.trainer import TrainOptions, train_rank, reference_training

__all__ = ["HybridPlan", "LayerStrategy", "PlanError", "load_plan", "parse_plan", "GptConfig", "full_parameters",
           "TrainOptions", "train_rank", "reference_training"]
