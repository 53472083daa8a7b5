#!/usr/bin/env python3
"""How exact are split-batch gradients? One torchvision model's gradients (dropout off, so float64 draws
nothing), unsplit in float32 and as kiwi's k micro-batches in float32, each against a float64 step:
the largest difference relative to each gradient's largest magnitude (docs/pytorch.md).

    .venv/bin/python bench/torch_microbatch_accuracy.py --model vgg16 --micro-batches 8
"""
import argparse

import torch
import torch.nn.functional as F
import torchvision

import kiwi.torch as kt


def relative_error(grads, reference) -> float:
    return max(float((g.double() - r).abs().max()) / max(float(r.abs().max()), 1e-300) for g, r in zip(grads, reference))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="vgg16")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)().eval()
    x = torch.randn(args.batch, 3, args.size, args.size)
    y = torch.randint(0, 1000, (args.batch,))
    exact = getattr(torchvision.models, args.model)().double().eval()
    exact.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    F.cross_entropy(exact(x.double()), y).backward()
    reference = [p.grad for p in exact.parameters()]
    F.cross_entropy(model(x), y).backward()
    unsplit = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    k = args.micro_batches
    cap = kt.capture(model, (x,), labels=y).at_batch(args.batch // k)
    kt.apply_remat(model, kt.plan_from_dropped(cap, [], config=kt.StepConfig(k))).train_step((x,), y)
    split = [p.grad.clone() for p in model.parameters()]
    between = max(float((a - b).abs().max()) / max(float(b.abs().max()), 1e-300) for a, b in zip(split, unsplit))
    print(f"{args.model}, batch {args.batch}: largest gradient error relative to float64: unsplit float32 "
          f"{relative_error(unsplit, reference):.2e}, {k} micro-batches {relative_error(split, reference):.2e}; "
          f"between the two {between:.2e}")


if __name__ == "__main__":
    main()
