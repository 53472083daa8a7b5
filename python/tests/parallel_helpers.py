"""Shared by test_parallelize.py and test_fsdp2_memory.py: small HuggingFace models trained 3 steps with
kiwi.torch.parallelize on 4 gloo processes and on one process, for comparison."""
from typing import Any, Dict, List, Tuple

import torch

SEQ, BATCH, VOCAB, STEPS, LR = 16, 8, 128, 3, 0.05
GPT2 = dict(n_layer=4, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=2 * SEQ, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0)
SMALL = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128, vocab_size=VOCAB,
             max_position_embeddings=2 * SEQ)


def write_llama_config(path: str) -> str:
    """build("llama")'s config as a config.json at `path` (what kiwi plans with --hf-config); returns path."""
    import transformers as tf
    tf.LlamaConfig(**SMALL, num_key_value_heads=2).to_json_file(path)
    return path


def write_gpt2_config(path: str) -> str:
    """build("gpt2")'s config as a config.json at `path`; returns path."""
    import transformers as tf
    tf.GPT2Config(**GPT2).to_json_file(path)
    return path


def build(name: str) -> torch.nn.Module:
    """A model by name, or from a config.json ("config:PATH"); the same weights every time."""
    import transformers as tf
    torch.manual_seed(0)
    if name.startswith("config:"):
        return tf.AutoModelForCausalLM.from_config(tf.AutoConfig.from_pretrained(name[len("config:"):]))
    if name == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**SMALL, num_key_value_heads=2))
    if name == "mistral":
        return tf.MistralForCausalLM(tf.MistralConfig(**SMALL, num_key_value_heads=2))
    if name == "qwen2":
        return tf.Qwen2ForCausalLM(tf.Qwen2Config(**SMALL, num_key_value_heads=2))
    if name == "qwen3":  # an RMSNorm over each query and key head inside the attention
        return tf.Qwen3ForCausalLM(tf.Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=16))
    if name == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(**GPT2))
    if name == "bert":
        return tf.BertForMaskedLM(tf.BertConfig(**SMALL, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    raise ValueError(name)


def batches() -> List[Dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(STEPS):
        ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
        out.append({"input_ids": ids, "labels": ids})
    return out


def plan(layers: List[Tuple], micro_batches: int = 2) -> Dict[str, Any]:
    """layers: (tp, dp, zero, checkpoint[, sequence_parallel[, selective[, recompute set]]]) per block."""
    return {"kiwi_plan_version": 1, "model": "", "layer": {
        "layers": [dict(tp=t, dp=d, zero=z, checkpoint=c, sequence_parallel=bool(rest[:1] and rest[0]),
                        selective_recompute=bool(rest[1:] and rest[1]), recompute=list(rest[2] if rest[2:] else []))
                   for t, d, z, c, *rest in layers],
        "pp_degree": 1, "pp_partition": [len(layers)], "global_batch": BATCH, "micro_batches": micro_batches}}


def merged(per_rank: List[Any]) -> Tuple[List[float], Dict[str, torch.Tensor], List[Dict]]:
    """One job's results of every rank: rank 0's losses, every stage's parameters, each rank's bytes."""
    params: Dict[str, torch.Tensor] = {}
    for _, p, _ in per_rank:
        params.update(p)
    return per_rank[0][0], params, [b for _, _, b in per_rank]


def reference(name: str) -> Tuple[List[float], Dict[str, torch.Tensor], Dict[str, torch.Tensor]]:
    """Single-process training: the losses of each step, the parameters after the last and before the first."""
    model = build(name)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for b in batches():
        loss = model(**b).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}, initial


def train(rank: int, world: int, jobs: List[Tuple[str, Dict[str, Any]]]) -> List[Any]:
    """On each rank: every (model, plan) job in turn, 3 steps; each rank returns (losses, its full parameters
    (a pipeline stage's own), bytes of each collective of its last step) per job."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from kiwi.torch.parallel import local_batch, parallelize, step
    from kiwi.torch.parallel.collectives import CollectiveBytes
    out = []
    for name, p in jobs:
        model = build(name)
        model.train()
        pm = parallelize(model, p)
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        losses = []
        for b in batches():
            with CollectiveBytes(pm.groups) as counted:
                loss = torch.tensor(step(pm, opt, local_batch(pm, b)))
            dist.all_reduce(loss)
            losses.append(float(loss) / world)  # every rank of a DP replica has the same loss
        params = {n: (q.full_tensor() if isinstance(q, DTensor) else q).detach().clone()
                  for n, q in model.named_parameters()}
        out.append((losses, params, counted.bytes))
    return out
