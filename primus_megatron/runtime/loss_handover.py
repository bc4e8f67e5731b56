"""Hand the loss dicts of a step to the last pipeline rank.

Megatron-LM's train_step, evaluate and logging read the losses on the last
pipeline rank; under the V placement they are computed on rank 0. They travel
as tensors over the pipeline group, on the model's device, through the same
timed p2p layer as activations: a header (JSON: keys, dtypes, shapes, plain
numbers) and then each tensor. No process group is created here (a group made
by two ranks during a step gets a per-rank name and deadlocks) and nothing is
pickled (a pickled CUDA tensor unpickles onto the sender's device index).
"""
from __future__ import annotations

import json
from numbers import Number
from typing import Any

import torch

from .p2p import P2P

_OP = "loss hand-over to the last pipeline rank"


def _header(store: list) -> dict:
    items = []
    for entry in store:
        if not isinstance(entry, dict):
            return {"error": f"a loss function returned {type(entry).__name__}, not a dict of tensors; under a V "
                             f"schedule the losses must travel to the last pipeline rank (collect_non_loss_data is "
                             f"not supported there)"}
        fields = []
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                fields.append([key, "tensor", str(value.dtype).removeprefix("torch."), list(value.shape)])
            elif isinstance(value, Number) and not isinstance(value, complex):
                fields.append([key, "number", value])
            else:
                return {"error": f"loss dict entry {key!r} is a {type(value).__name__}; only tensors and numbers "
                                 f"can travel to the last pipeline rank"}
        items.append(fields)
    return {"items": items}


def send_losses(p2p: P2P, store: list, *, to: int, device: torch.device) -> None:
    """Send `store` (megatron's list of loss dicts) to pipeline rank `to`."""
    header = _header(store)
    raw = torch.tensor(list(json.dumps(header).encode()), dtype=torch.uint8, device=device)
    sends = [p2p.post_send(torch.tensor([raw.numel()], dtype=torch.int64, device=device), peer=to,
                           what="loss header size", op=_OP),
             p2p.post_send(raw, peer=to, what="loss header", op=_OP)]
    if "error" not in header:
        for entry in store:
            for key, value in entry.items():
                if isinstance(value, torch.Tensor):
                    sends.append(p2p.post_send(value.detach(), peer=to, what=f"loss {key!r}", op=_OP))
    for pending in sends:
        p2p.finish_send(pending, op=_OP)
    if "error" in header:
        raise ValueError(header["error"])


def receive_losses(p2p: P2P, *, source: int, device: torch.device) -> list:
    """Receive the loss dicts sent by `send_losses` from pipeline rank `source`."""
    size = p2p.post_recv([1], torch.int64, device, peer=source, what="loss header size", op=_OP)
    length = int(p2p.wait(size, op=_OP).item())
    raw = p2p.post_recv([length], torch.uint8, device, peer=source, what="loss header", op=_OP)
    header = json.loads(bytes(p2p.wait(raw, op=_OP).cpu().tolist()).decode())
    if "error" in header:
        raise ValueError(header["error"])
    store: list[dict[str, Any]] = []
    for fields in header["items"]:
        entry: dict[str, Any] = {}
        for key, kind, *rest in fields:
            if kind == "number":
                entry[key] = rest[0]
            else:
                dtype, shape = getattr(torch, rest[0]), rest[1]
                pending = p2p.post_recv(shape, dtype, device, peer=source, what=f"loss {key!r}", op=_OP)
                entry[key] = p2p.wait(pending, op=_OP)
        store.append(entry)
    return store
