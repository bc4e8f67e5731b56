"""Stand-in for the ``WeightGradStore`` of TE v2.11 ``pytorch/module/_common.py``
(lines 189-260 at commit c188b533): a first-in-first-out queue of
(tensor_list, func) pairs, present only when the store was created delayed."""
from __future__ import annotations

import queue

import torch


class WeightGradStore:
    def __init__(self, delay_wgrad_compute: bool = False, ub_bulk_wgrad: bool = False) -> None:
        # Like TE: the queue exists only when created delayed; enabling later leaves it None.
        if delay_wgrad_compute:
            assert ub_bulk_wgrad is False, "ub_bulk_wgrad is not supported when enabling delay_wgrad_compute"
            self.context = queue.Queue()
            self.enabled = True
        else:
            self.context = None
            self.enabled = False

    def delay_wgrad_compute(self) -> bool:
        return self.enabled

    def enable_delay_wgrad_compute(self) -> None:
        self.enabled = True

    def disable_delay_wgrad_compute(self) -> None:
        self.enabled = False

    def put(self, tensor_list, func) -> None:
        assert self.enabled is True, "delay_wgrad_compute is not enabled"
        self.context.put([tensor_list, func])

    def pop(self):
        """Run the oldest stored work: returns (func(*tensor_list), tensor_list)."""
        assert self.enabled is True, "delay_wgrad_compute is not enabled"
        if self.context.qsize() > 0:
            tensor_list, func = self.context.get()
            return func(*tensor_list), tensor_list
        if torch.distributed.is_initialized():
            raise RuntimeError(f"Pop empty queue. rank {torch.distributed.get_rank()}")
        raise RuntimeError("Pop empty queue. No distributed environment detected.")

    def assert_empty(self) -> None:
        assert self.enabled is True, "delay_wgrad_compute is not enabled"
        assert self.context.empty(), "Queue is not empty."
