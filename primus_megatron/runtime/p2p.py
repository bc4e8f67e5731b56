"""Point-to-point transfers between pipeline ranks, with timeouts that say who waited for what.

Receives and sends are posted without blocking, in the order the lowering
pass fixed (hang-free under NCCL/RCCL rendezvous semantics, see
schedules/validation.py); the executor waits on a receive right before the op
that consumes it and on sends once they are no longer needed.
"""
from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 600.0


class PipelineTimeout(RuntimeError):
    """A rank waited longer than the p2p timeout for a peer."""


@dataclass
class _Pending:
    work: object
    tensor: torch.Tensor
    what: str  # e.g. "activation mb3 stage 1->2"
    peer: int  # pipeline rank of the peer


@dataclass
class P2P:
    """Non-blocking transfers within one pipeline group."""

    group: Optional[dist.ProcessGroup]
    rank: int  # this rank within the pipeline group
    timeout_s: float = DEFAULT_TIMEOUT_S
    sends: list = field(default_factory=list)

    def global_rank(self, peer: int) -> int:
        return dist.get_global_rank(self.group, peer) if self.group is not None else peer

    def post_recv(self, shape, dtype, device, *, peer: int, what: str, op: str = "") -> _Pending:
        buf = torch.empty(shape, dtype=dtype, device=device, requires_grad=False)
        try:
            work = dist.irecv(buf, src=self.global_rank(peer), group=self.group)
        except Exception as exc:  # a dead peer can fail the post itself
            raise self._error(f"receive of {what} from", peer, op, exc, posting=True) from exc
        return _Pending(work, buf, what, peer)

    def post_send(self, tensor: torch.Tensor, *, peer: int, what: str, op: str = "") -> _Pending:
        tensor = tensor.contiguous()
        try:
            work = dist.isend(tensor, dst=self.global_rank(peer), group=self.group)
        except Exception as exc:
            raise self._error(f"send of {what} to", peer, op, exc, posting=True) from exc
        pending = _Pending(work, tensor, what, peer)
        self.sends.append(pending)
        return pending

    def wait(self, pending: _Pending, *, op: str) -> torch.Tensor:
        """Wait for `pending`; on timeout or failure raise naming this rank, the op, the peer and the message."""
        started = time.perf_counter()
        try:
            pending.work.wait(timeout=datetime.timedelta(seconds=self.timeout_s))
        except Exception as exc:  # gloo/NCCL raise RuntimeError subclasses with backend-specific text
            is_send = any(p is pending for p in self.sends)
            what = f"send of {pending.what} to" if is_send else f"receive of {pending.what} from"
            raise self._error(what, pending.peer, op, exc, waited=time.perf_counter() - started) from exc
        return pending.tensor

    def _error(self, what: str, peer: int, op: str, exc: BaseException, *, waited: float = 0.0,
               posting: bool = False) -> "PipelineTimeout":
        detail = str(exc).splitlines()[0][:200] if str(exc) else ""
        how = "failed to post" if posting else f"waited {waited:.3g} s (limit {self.timeout_s:g} s)"
        where = f" in op {op}" if op else ""
        return PipelineTimeout(
            f"pipeline rank {self.rank} (global {dist.get_rank()}) {how}{where} for the {what} pipeline rank {peer} "
            f"(global {self.global_rank(peer)}); that rank died, hangs or runs a different schedule "
            f"[{type(exc).__name__}: {detail}]")

    def finish_send(self, pending: _Pending, *, op: str) -> None:
        """Wait for one send and forget it."""
        self.wait(pending, op=op)
        self.sends = [p for p in self.sends if p is not pending]

    def reap_sends(self) -> list[_Pending]:
        """Forget sends that completed; returns them (their tensors may be freed)."""
        done, waiting = [], []
        for p in self.sends:  # asked once per send: one finishing between two asks would be lost
            (done if p.work.is_completed() else waiting).append(p)
        self.sends = waiting
        return done

    def wait_all_sends(self, *, op: str = "end of step") -> list[_Pending]:
        done = list(self.sends)
        for p in done:
            self.wait(p, op=op)
        self.sends = []
        return done
