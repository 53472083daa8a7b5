# kiwi plan's default GPT (4 layers, batch 8) as a Megatron-LM launch on 8 GPUs: TP 2, 4 data-parallel ranks,
# the distributed optimizer, every layer recomputed.
torchrun pretrain_gpt.py --num-layers 4 --tensor-model-parallel-size 2 --use-distributed-optimizer \
  --micro-batch-size 1 --global-batch-size 8 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
