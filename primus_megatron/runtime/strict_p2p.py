"""Gloo p2p executed the way NCCL/RCCL run a rank's communication on the GPU.

Plain gloo accepts orders that hang on a GPU: every `isend`/`irecv` is live the
moment it is posted, whatever else the rank posted before it. Under PyTorch's
ProcessGroupNCCL with eager communicator init, a process group's unbatched p2p
ops run on one NCCL stream in posting order (a receive that is not matched yet
holds everything posted after it), and the ops of one `batch_isend_irecv` call
are one NCCL group that progresses together. This module gives a gloo process
group that behaviour: one ordered queue per process group, served by a thread
(the "stream"), which takes the next submission (one op, or one batch) only
when the previous one has completed, and only then posts it to gloo. A schedule
that would hang under NCCL hangs here too, and the host's timed wait names it.

Sends: a gloo (TCP) send completes only once the receiver has posted the
matching receive (measured with torch 2.13: `isend(...).wait()` returns when
the peer's `irecv` is posted, for 4-byte to 4-MiB messages; before `wait()`,
gloo's `is_completed()` stays False whatever happened). Here a receive is
posted to gloo only when it reaches the head of its queue, so a send completes
only once its receive is active on the peer: at least as strict as NCCL, whose
small sends may finish into the peer's buffers before the receive is posted.
No acknowledgement message is needed. A submission made while the queue is idle
(everything before it completed) is posted to gloo from the caller's thread at
once, as the stream would start it at once; the thread only waits for it. A
hand-off to post it would wait for the interpreter lock, which the caller's
next op holds for its host work (about 0.7 ms a message on an emulated pipeline,
benchmarks/p2p_strict_overhead.py).

Lazy init (no `device_id`) is modelled on request (`lazy=True`): PyTorch's
`ProcessGroupNCCL::pointToPoint` keys a lone send or receive by the rank pair and
creates that two-rank communicator on the pair's first op (a rendezvous that
blocks the host of both), and keys a batched op (one of `batch_isend_irecv`, even
a batch of one) by the device, whose first use
creates the group's communicator (a rendezvous of every rank of the group). So
here the host's first lone post to a peer blocks until that peer's host posts a
lone op to it too, and the host's first batch blocks until every rank of the
group posts its first batch. The queue stays one per group, as in eager init
(lazy init gives each pair a stream of its own: one queue is the stricter).

The process counts its submissions that hold a receive and have not completed
(`pending_receives`): emulated ops read it to charge ROCm's pending-receive
stall (emulation/chunks.py, PyTorch #172668).
"""
from __future__ import annotations

import datetime
import queue
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

_FIRST_CONTACT_TAG = 7  # the lazy-init handshake; data uses gloo's default tag 0
_PENDING = [0]  # submissions of this process's queues holding a receive, not completed (module doc)
_PENDING_LOCK = threading.Lock()


def pending_receives() -> int:
    """How many submissions holding a receive this process has queued and not seen complete."""
    return _PENDING[0]


def _count_pending(completion: "Completion", step: int) -> None:
    if completion.receives:
        with _PENDING_LOCK:
            _PENDING[0] += step


@dataclass
class Entry:
    """One op of a submission: `send` or receive of `tensor` with global rank `peer`."""

    send: bool
    tensor: torch.Tensor
    peer: int  # global rank
    label: str  # for messages: "send of activation mb0 stage 0->1 to pipeline rank 1"


class Completion:
    """The work handle of one submission (a lone op or a whole batch): it completes when
    every op of it has, as an NCCL group does."""

    def __init__(self, queue_: "StrictQueue", entries: list) -> None:
        self.queue = queue_
        self.entries = entries
        self.done = threading.Event()
        self.error: Optional[BaseException] = None
        self.works: Optional[list] = None  # gloo's works once posted
        self.receives = any(not e.send for e in entries)

    def is_completed(self) -> bool:
        return self.done.is_set()

    def wait(self, timeout: Optional[datetime.timedelta] = None) -> bool:
        seconds = None if timeout is None else timeout.total_seconds()
        if not self.done.wait(seconds):
            raise TimeoutError(f"strict p2p: not completed after {seconds:g} s; this rank's p2p queue is held by "
                               f"{self.queue.head_description()}")
        if self.error is not None:
            raise self.error
        return True


class StrictQueue:
    """One process group's ordered p2p queue (the NCCL stream of eager init)."""

    def __init__(self, group, lazy: bool = False, made: bool = False) -> None:
        self.group = group
        self.lazy = lazy
        self.contacted: set = set()
        self.group_made = made  # its communicator made already (a per-direction twin, runtime/p2p_groups.py)
        self.items: "queue.SimpleQueue[Completion]" = queue.SimpleQueue()
        self.head: Optional[Completion] = None
        self.failed: Optional[BaseException] = None
        self.lock = threading.Lock()
        self.unfinished = 0  # submissions not completed yet: 0 means the stream is idle
        self.submitted = 0  # submissions ever queued (tests read which groups carried traffic)
        self.thread = threading.Thread(target=self._serve, name="primus-strict-p2p", daemon=True)
        self.thread.start()

    def submit(self, entries: list, *, batched: Optional[bool] = None,
               timeout_s: Optional[float] = None) -> Completion:
        """Queue one lone op or one batch (`batched`, by default when there are several entries;
        a batch of one is a batch: it goes through the group's communicator, module doc). Under
        lazy init a first contact blocks here, on the host, for up to `timeout_s` (TimeoutError)."""
        batched = len(entries) > 1 if batched is None else batched
        if self.lazy and not batched:
            self._first_contact(entries[0], timeout_s)
        elif self.lazy and not self.group_made:
            self._make_group(timeout_s)
        completion = Completion(self, entries)
        self.submitted += 1
        with self.lock:
            idle = self.unfinished == 0 and self.failed is None
            self.unfinished += 1
        if idle:  # nothing ahead of it: the stream starts it now (module doc)
            self.head = completion
            try:
                completion.works = self._post(entries)
            except BaseException:
                with self.lock:
                    self.unfinished -= 1
                self.head = None
                raise
        _count_pending(completion, 1)
        self.items.put(completion)
        return completion

    def _post(self, entries: list) -> list:
        return [dist.isend(e.tensor, e.peer, group=self.group) if e.send
                else dist.irecv(e.tensor, e.peer, group=self.group) for e in entries]

    def head_description(self) -> str:
        head = self.head
        if head is None:
            return "nothing (it is idle)"
        what = "; ".join(e.label for e in head.entries)
        return f"the batch [{what}]" if len(head.entries) > 1 else f"the {what}"

    def _first_contact(self, entry: Entry, timeout_s: Optional[float]) -> None:
        """Lazy init: the first lone p2p with a peer creates a two-rank communicator, a rendezvous
        that blocks the host of both ranks until each has posted a lone op to the other."""
        if entry.peer in self.contacted:
            return
        token, echo = torch.zeros(1), torch.zeros(1)
        works = [dist.isend(token, entry.peer, group=self.group, tag=_FIRST_CONTACT_TAG),
                 dist.irecv(echo, entry.peer, group=self.group, tag=_FIRST_CONTACT_TAG)]
        self._wait(works, timeout_s, f"the first contact with global rank {entry.peer} (lazy init creates "
                                     f"their two-rank communicator, at the {entry.label})")
        self.contacted.add(entry.peer)

    def _make_group(self, timeout_s: Optional[float]) -> None:
        """Lazy init: the first batch creates the group's communicator, a rendezvous of every rank."""
        work = dist.all_reduce(torch.zeros(1), group=self.group, async_op=True)
        self._wait([work], timeout_s, "every rank of the group to post its first batch (lazy init creates the "
                                      "group's communicator there)")
        self.group_made = True

    def _wait(self, works: list, timeout_s: Optional[float], what: str) -> None:
        started = time.monotonic()
        for work in works:
            left = None if timeout_s is None else max(0.001, timeout_s - (time.monotonic() - started))
            try:
                work.wait() if left is None else work.wait(timeout=datetime.timedelta(seconds=left))
            except Exception as exc:
                self.failed = exc
                raise TimeoutError(f"strict p2p (lazy init): waited {time.monotonic() - started:.3g} s on the "
                                   f"host for {what}") from exc

    def _serve(self) -> None:
        while True:
            completion = self.items.get()
            self.head = completion
            try:
                if completion.works is None:
                    if self.failed is not None:  # a failed communicator fails everything after it
                        raise self.failed
                    completion.works = self._post(completion.entries)
                for work in completion.works:  # all posted: they progress together, in gloo's own threads
                    work.wait()
            except BaseException as exc:  # noqa: BLE001 (handed to the host's wait)
                self.failed = self.failed or exc
                completion.error = exc
            self.head = None
            with self.lock:
                self.unfinished -= 1
            _count_pending(completion, -1)
            completion.done.set()


_QUEUES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def queue_for(group, *, lazy: bool = False, made: bool = False) -> StrictQueue:
    """The process group's queue: one per group for the process's lifetime, as NCCL's stream is
    (a new queue after a failure: the abandoned one keeps its thread, blocked). `made`: under lazy
    init, the group's communicator was made at start-up (its first batch waits for no one)."""
    key = group if group is not None else dist.group.WORLD
    with _LOCK:
        q = _QUEUES.get(key)
        if q is None or q.failed is not None or q.lazy != lazy:
            q = _QUEUES[key] = StrictQueue(key, lazy=lazy, made=made)
        return q


def abandon(group) -> None:
    """Forget the group's queue (after a timeout its head never completes; a later step gets a new one)."""
    key = group if group is not None else dist.group.WORLD
    with _LOCK:
        _QUEUES.pop(key, None)
