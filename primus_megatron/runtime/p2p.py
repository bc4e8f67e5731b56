"""Point-to-point transfers between pipeline ranks, with timeouts that say who waited for what.

Receives and sends are posted without blocking, in the order the lowering
pass fixed, one at a time or several together as one batch
(`torch.distributed.batch_isend_irecv`: one NCCL/RCCL group, which progresses
and completes as a whole); the executor waits on a receive right before the
op that consumes it and on sends once they are no longer needed.

How ops are carried (`mode`):
- on NCCL/RCCL (`native`): posted as they are; the GPU runs them as NCCL does.
- on gloo, `strict` (the default): executed the way NCCL runs them on the GPU
  (runtime/strict_p2p.py: one ordered queue per process group, batches
  together, sends complete only once the receive is active on the peer), so a
  schedule that would hang on the GPU times out on CPU too, named.
- on gloo, `plain`: posted to gloo as they are (gloo accepts orders that hang
  under NCCL); for comparison.

Which process group carries them (`groups`, `--pipeline-p2p-groups`): the
pipeline's, or with a group per direction the one of the message's direction
(schedules/p2p_groups.py; a posting that holds both directions is one batch per
group, as the queue model splits it), each group with its own NCCL queue (and,
on gloo, its own strict queue).

How they are waited (`waits`): on the GPU (`device`), without a timeout, so that
the wait only makes the current stream wait and the host never blocks on a
receive; a watchdog thread (runtime/watchdog.py) names a hang instead. On CPU
(`host`), with the p2p timeout, raising PipelineTimeout.
"""
from __future__ import annotations

import datetime
import os
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.distributed as dist

from ..health import flight
from ..schedules.p2p_groups import ONE, PER_DIRECTION, split
from . import strict_p2p, watchdog

DEFAULT_TIMEOUT_S = 600.0
MODES = ("strict", "strict-lazy", "plain")
MODE_ENV = "PRIMUS_PIPELINE_P2P"  # strict | plain | strict-lazy: how CPU (gloo) runs carry p2p


class PipelineTimeout(RuntimeError):
    """A rank waited longer than the p2p timeout for a peer."""


@dataclass
class Post:
    """One send or receive to post: `tensor` is what to send, or the buffer to receive into."""

    send: bool
    tensor: torch.Tensor
    peer: int  # pipeline rank
    what: str  # e.g. "activation mb3 stage 1->2"
    op: str = ""  # the op that produces (send) or consumes (receive) it, for messages

    def label(self) -> str:
        return f"send of {self.what} to pipeline rank {self.peer}" if self.send else \
            f"receive of {self.what} from pipeline rank {self.peer}"


@dataclass
class _Pending:
    work: object  # the op's work, or its batch's (shared by every op of the batch)
    tensor: torch.Tensor
    what: str  # e.g. "activation mb3 stage 1->2"
    peer: int  # pipeline rank of the peer
    send: bool = False
    group: int = 0  # which of the P2P's groups carries it


class _Works:
    """The works `batch_isend_irecv` returned (one per op on gloo, one for the whole group on
    NCCL: torch 2.13 `distributed_c10d.batch_isend_irecv` returns its coalescing manager's works),
    waited and asked as one. Each is waited once: a gloo send waited a second time never returns."""

    def __init__(self, works: list) -> None:
        self.works = works

    def wait(self, timeout: Optional[datetime.timedelta] = None) -> bool:
        while self.works:
            self.works[0].wait() if timeout is None else self.works[0].wait(timeout=timeout)
            self.works.pop(0)
        return True

    def is_completed(self) -> bool:
        return all(work.is_completed() for work in self.works)


def _is_send(post: Post) -> bool:
    return post.send


def resolve_mode(mode: Optional[str]) -> str:
    """How gloo runs carry p2p: `mode`, else $PRIMUS_PIPELINE_P2P, else strict (one of MODES)."""
    text = (mode or os.environ.get(MODE_ENV) or "strict").strip().lower()
    if text not in MODES:
        raise ValueError(f"p2p mode {text!r} (option p2p_mode or ${MODE_ENV}) is not one of {', '.join(MODES)}")
    return text


@dataclass
class P2P:
    """Non-blocking transfers within one pipeline group."""

    group: Optional[dist.ProcessGroup]
    rank: int  # this rank within the pipeline group
    timeout_s: float = DEFAULT_TIMEOUT_S
    mode: Optional[str] = None  # gloo only: strict (default), strict-lazy or plain; see module doc
    waits: Optional[str] = None  # host | device; by default device on NCCL/RCCL, host on gloo
    sends: list = field(default_factory=list)
    # per-direction: (`group`, its towards-lower-ranks twin), `runtime.p2p_groups`; empty: `group` alone
    groups: tuple = ()
    _global_ranks: dict = field(default_factory=dict, repr=False)  # peer -> global rank

    def __post_init__(self) -> None:
        mode = resolve_mode(self.mode)
        self.backend = str(dist.get_backend(self.group))
        self.mode = mode if self.backend == "gloo" else "native"
        self.layout = PER_DIRECTION if len(self.groups) == 2 else ONE
        self.groups = self.groups or (self.group,)
        # the twin's communicator is made at start-up (runtime.p2p_groups): no lazy creation at its first batch
        self._queues = [strict_p2p.queue_for(g, lazy=mode == "strict-lazy", made=i > 0)
                        for i, g in enumerate(self.groups)] if self.mode.startswith("strict") else None
        if self.waits is None:
            self.waits = "host" if self.backend == "gloo" else "device"
        if self.waits not in ("host", "device"):
            raise ValueError(f"P2P waits={self.waits!r}: use 'host' or 'device'")
        self._watchdog = None
        if self.waits == "device":
            self._watchdog = watchdog.get(self.timeout_s, who=f"pipeline rank {self.rank} (global {dist.get_rank()})")

    def global_rank(self, peer: int) -> int:
        """`peer`'s global rank (asked of torch once per peer: every post names its peer)."""
        found = self._global_ranks.get(peer)
        if found is None:
            found = self._global_ranks[peer] = dist.get_global_rank(self.group, peer) if self.group is not None else peer
        return found

    # -- posting ------------------------------------------------------------------------------
    def post_recv(self, shape, dtype, device, *, peer: int, what: str, op: str = "") -> _Pending:
        buf = torch.empty(shape, dtype=dtype, device=device, requires_grad=False)
        return self.post([Post(False, buf, peer, what, op)])[0]

    def post_send(self, tensor: torch.Tensor, *, peer: int, what: str, op: str = "") -> _Pending:
        return self.post([Post(True, tensor.contiguous(), peer, what, op)])[0]

    def post(self, posts: list, *, batched: Optional[bool] = None) -> list:
        """Post one op alone, or ops as one batch (`batched`; by default when there are several);
        a _Pending per op (a batch's share its work). A batch of one op is still a batch: torch's
        `batch_isend_irecv` runs it in a coalescing group on NCCL (distributed_c10d.py, torch 2.13),
        which under lazy init uses the group's communicator, not the pair's."""
        batched = len(posts) > 1 if batched is None else batched
        made: dict = {}  # id of a post -> its _Pending (a batch over both directions is posted per group)
        for g, part in split(self.layout, self.rank, posts, _is_send):
            for p, pending in zip(part, self._post_group(g, part, batched)):
                made[id(p)] = pending
        return [made[id(p)] for p in posts]

    def _post_group(self, g: int, posts: list, batched: bool) -> list:
        try:
            work = self._post(g, posts, batched)
        except Exception as exc:  # a dead peer can fail the post itself (or, lazy, never make first contact)
            if self._queues is not None:
                strict_p2p.abandon(self.groups[g])
            first = posts[0]
            what = f"send of {first.what} to" if first.send else f"receive of {first.what} from"
            raise self._error(what, first.peer, first.op, exc, posting=True) from exc
        if self._watchdog is not None:
            first = posts[0]
            self._watchdog.track(work, "; ".join(f"{p.label()} (global {self.global_rank(p.peer)})" for p in posts),
                                 "; ".join(dict.fromkeys(p.op for p in posts if p.op)),
                                 peer=(first.peer, self.global_rank(first.peer), first.what, first.send))
        pendings = []
        for p in posts:
            pending = _Pending(work, p.tensor, p.what, p.peer, p.send, g)
            if p.send:
                self.sends.append(pending)
            pendings.append(pending)
        return pendings

    def _post(self, g: int, posts: list, batched: bool):
        group = self.groups[g]
        if self._queues is not None:
            entries = [strict_p2p.Entry(p.send, p.tensor, self.global_rank(p.peer), p.label()) for p in posts]
            return self._queues[g].submit(entries, batched=batched, timeout_s=self.timeout_s)
        if not batched:
            p = posts[0]
            op = dist.isend if p.send else dist.irecv
            return op(p.tensor, self.global_rank(p.peer), group=group)
        ops = [dist.P2POp(dist.isend if p.send else dist.irecv, p.tensor, self.global_rank(p.peer), group)
               for p in posts]
        return _Works(dist.batch_isend_irecv(ops))

    # -- waiting ------------------------------------------------------------------------------
    def wait(self, pending: _Pending, *, op: str) -> torch.Tensor:
        """Wait for `pending`; on timeout or failure raise naming this rank, the op, the peer and the message."""
        if self.waits == "device":
            # the current stream waits; the host goes on (a hang is the watchdog's to name)
            try:
                pending.work.wait()
            except Exception as exc:  # an NCCL error the process group already detected
                what = f"send of {pending.what} to" if pending.send else f"receive of {pending.what} from"
                raise self._error(what, pending.peer, op, exc) from exc
            return pending.tensor
        started = time.perf_counter()
        flight.waiting_on(pending.peer, self.global_rank(pending.peer), pending.what, pending.send, op)
        try:
            pending.work.wait(timeout=datetime.timedelta(seconds=self.timeout_s))
        except Exception as exc:  # gloo/NCCL raise RuntimeError subclasses with backend-specific text
            if self._queues is not None:
                strict_p2p.abandon(self.groups[pending.group])  # its head never completes: a later step starts afresh
            what = f"send of {pending.what} to" if pending.send else f"receive of {pending.what} from"
            error = self._error(what, pending.peer, op, exc, waited=time.perf_counter() - started)
            flight.write_report("timeout", str(error))  # before the stack unwinds: the wait is still recorded
            raise error from exc
        flight.wait_ended()
        return pending.tensor

    def _error(self, what: str, peer: int, op: str, exc: BaseException, *, waited: float = 0.0,
               posting: bool = False) -> "PipelineTimeout":
        detail = str(exc).splitlines()[0][:300] if str(exc) else ""
        how = ("failed to post" if posting else "failed waiting" if self.waits == "device"
               else f"waited {waited:.3g} s (limit {self.timeout_s:g} s)")
        where = f" in op {op}" if op else ""
        return PipelineTimeout(
            f"pipeline rank {self.rank} (global {dist.get_rank()}) {how}{where} for the {what} pipeline rank {peer} "
            f"(global {self.global_rank(peer)}); that rank died, hangs, runs a different schedule, or the order "
            f"of p2p ops would hang under NCCL ({self.mode} p2p) [{type(exc).__name__}: {detail}]")

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
