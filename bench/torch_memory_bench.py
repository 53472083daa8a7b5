#!/usr/bin/env python3
"""Predicted vs measured peak memory and step time of kiwi's rematerialization plans on torchvision
models (kiwi.torch.bench; docs/pytorch.md). Run from the repository root after building the Python
extension (cmake -DKIWI_BUILD_PYTHON=ON):

    .venv/bin/python bench/torch_memory_bench.py --model vgg16 --batch 32
"""
import os
import sys

if __name__ == "__main__":
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for build in ("build", "build-py"):
        path = os.path.join(root, build, "python")
        if os.path.isdir(os.path.join(path, "kiwi")) and path not in sys.path:
            sys.path.append(path)
    from kiwi.torch.bench import main
    sys.exit(main())
