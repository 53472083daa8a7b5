#!/bin/bash
# A Megatron-LM launch of Llama-2 7B on 2 nodes of 8 GPUs, written the way Megatron-LM's examples are.
GPUS_PER_NODE=8
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes 2 pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 11008 --num-attention-heads 32 \
    --seq-length 4096 --max-position-embeddings 4096 \
    --tensor-model-parallel-size 4 \
    --pipeline-model-parallel-size 2 \
    --num-layers-per-virtual-pipeline-stage 4 \
    --sequence-parallel \
    --use-distributed-optimizer \
    --micro-batch-size 1 --global-batch-size=64 \
    --recompute-granularity selective \
    --bf16 --lr 3e-4 --train-iters 1000  # the optimizer's flags do not shape the plan
