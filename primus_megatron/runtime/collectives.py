"""Where the small tensors of a control collective must live.

NCCL only reduces device tensors and gloo only host tensors; a process group
created with both ("cpu:gloo,cuda:nccl") takes either, so host is preferred.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def collective_device(group=None) -> torch.device:
    """The device for a tensor passed to a collective on `group` (default: world)."""
    backend = str(dist.get_backend(group)).lower()
    if "nccl" in backend and "gloo" not in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
