"""megatron-core's torch_dist checkpoint writer, run in the rank's own process.

megatron-core 0.16.1's `FileSystemWriterAsync` hands its buckets to worker
processes it forks (from a rank running gloo threads) and waits for them with no
timeout: a worker that dies before reporting hangs the rank for good (seen in CI,
on a missing psutil); 0.19 writes them from threads. Both collect the results in a
multiprocessing manager's queue, a spawned interpreter (on CPU each save pays its
start-up). In CPU mode the same per-bucket writer is called in turn here and its
results go where its workers would put them, so a failure is an exception and a
save costs only the writing. The torch_dist strategy of 0.19 looks the writer class
and the queue factory up when it saves (`get_async_strategy("mcore")`), so patching
the class and the module's factory covers both versions.
"""
from __future__ import annotations

import functools
import queue

import torch

_INSTALLED = False


def write_in_process() -> None:
    """Make megatron's torch_dist saves write in this process (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    writer = filesystem_async.FileSystemWriterAsync

    def get_save_function_and_args(self):
        if not self.write_buckets:
            return None, None, []
        transforms = [self.transforms] if hasattr(self, "transforms") else []
        return (functools.partial(_write_buckets, writer, transforms, getattr(self, "use_msc", False)),
                functools.partial(self.preload_tensors, self.write_buckets, True),
                [torch.distributed.get_rank(), self.write_buckets, self.results_queue])

    writer.get_save_function_and_args = get_save_function_and_args
    # no manager process for the results: megatron-core 0.16.1 names the factory
    # _get_write_results_queue, 0.19 get_write_results_queue (looked up when a save prepares its
    # buckets, and imported by the torch_dist strategy at save time)
    names = [n for n in ("_get_write_results_queue", "get_write_results_queue") if hasattr(filesystem_async, n)]
    if not names:
        raise RuntimeError("megatron-core's filesystem_async has no write-results queue factory "
                           "(_get_write_results_queue or get_write_results_queue): CPU checkpoints cannot be written")
    for name in names:
        setattr(filesystem_async, name, _results_queue)
    _INSTALLED = True


def _results_queue(*args, **kwargs) -> queue.Queue:
    """In place of megatron's results-queue factory (a multiprocessing manager's queue)."""
    return queue.Queue()


def _write_buckets(writer, transforms, use_msc, rank, buckets, results) -> None:
    """megatron's per-bucket writer, called in turn; results as its workers report
    them: {bucket index: write results}, or the first error."""
    written: dict = {}
    for i, bucket in enumerate(buckets):
        out, done = queue.Queue(), queue.Queue()
        done.put(i)  # the writer marks its task done on this queue
        writer.write_preloaded_data(transforms, i, bucket, out, done, True, use_msc=use_msc)
        _, result = out.get_nowait()
        if isinstance(result, Exception):
            results.put(result)
            return
        written[i] = result
    results.put(written)
