"""glibc malloc settings that make a CPU process keep the memory it frees, as PyTorch's CUDA caching
allocator does on a GPU (kiwi's memory and time model assumes it). By default glibc hands large freed
blocks back to the OS and every training step page-faults to get them again: +30% on an MLP step here,
up to 1.6x on a gloo rank's vocabulary-parallel loss (docs/fidelity.md). glibc reads these variables
once, when a process starts, so they apply to processes started after they are set."""
import os
from typing import Dict

GLIBC_CACHING_ALLOCATOR: Dict[str, str] = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 32),  # no block is mmap'ed (and unmapped when freed) below 4 GiB
    "MALLOC_TRIM_THRESHOLD_": str(1 << 36),  # the heap's free top is never returned to the OS
    "MALLOC_TOP_PAD_": str(1 << 30),         # the heap grows 1 GiB of address space at a time
}


def is_set(environ=None) -> bool:
    """Whether `environ` (default: this process's) already carries the settings."""
    environ = os.environ if environ is None else environ
    return all(environ.get(k) == v for k, v in GLIBC_CACHING_ALLOCATOR.items())
