"""The copies activation offload makes, one class per device kind: where host buffers come from,
which streams copy, what "this copy is done" means, and how long each copy took.

`HostCopies` (CPU, and every test without a GPU): a copy is done when it returns; a host pool holds
what went out. `CudaCopies` (CUDA and ROCm): pinned host buffers, one device-to-host and one
host-to-device stream per device for the life of the process, events between them and the compute
stream; the host never waits. Both hand the offloader the same four verbs (`out`, `back`,
`compute_waits`, `drain`) and keep a record of every copy for the bandwidth measurement
(`timed`), so `runtime.offload` has one code path and a test can put a device double (a stream
that runs behind the host) in their place.

CUDA facts this relies on (torch 2.13):
- `torch.cuda.Stream()` draws from a pool of 32 streams per priority and device, round-robin
  (`c10/cuda/CUDAStream.cpp`), the pool ProcessGroupNCCL also draws from; a copy stream drawn
  every step soon is an NCCL stream, and copies queue behind a receive that waits for a peer.
  Ours are created once per device with `cudaStreamCreateWithFlags(cudaStreamNonBlocking)`
  (`hipStreamCreateWithFlags` on ROCm) through the runtime library torch loaded, outside the pool;
  where that library cannot be reached, two pool streams drawn once at first use.
- A non-blocking copy from or to pinned memory records an event on the host block
  (`CachingHostAllocator_recordEvent` in `ATen/native/cuda/Copy.cu`), so a pinned buffer may be
  dropped while its copy runs: the host allocator reuses it only after that event.
- The host allocator rounds every pinned allocation up to a power of two and caches the block
  (`ATen/core/CachingHostAllocator.h`, `PowerOf2Ceil`): `pinned_bytes` is what it allocates. What it
  holds in all (cached blocks of every size, and blocks whose copies have not run) was 2-5x the
  offload's peak in use on an H200 with the host running ahead (docs/benchmarks/gpu.md); `held_bytes` reports
  it. (An arena of our own, a few power-of-two slabs carved per buffer, held no less there.)
- Device memory: a block used on a second stream and marked with `record_stream` is, once freed,
  reused only after the work queued on that stream at the free has run (an event the allocator
  checks at each allocation, and waits for before raising out-of-memory:
  `c10/cuda/CUDACachingAllocator.cpp`), so the offloader drops a moved storage as its copy out is
  queued, without waiting.
"""
from __future__ import annotations

import ctypes
import time
import warnings
from typing import Any, Optional

import torch

from .resident import HOST_SCOPE

ALIGN = 512  # bytes: every segment of an entry's buffer starts here, a multiple of any dtype's size


def aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def pinned_bytes(n: int) -> int:
    """What torch's caching host allocator allocates for `n` pinned bytes (the next power of two)."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


class HostCopies:
    """CPU: copies run on the calling thread and are done when they return (module doc)."""

    cuda = False

    def __init__(self) -> None:
        self.timed: list = []  # ("D2H" | "H2D", bytes, seconds)

    def out(self, sources: list, offsets: list, nbytes: int) -> tuple[torch.Tensor, Any]:
        """Copy each uint8 `sources[i]` into one host buffer at `offsets[i]`; (buffer, done token)."""
        start = time.perf_counter()
        with torch.profiler.record_function(HOST_SCOPE):  # host memory: `resident` tells it from the device's
            host = torch.empty(nbytes, dtype=torch.uint8)
        for src, at in zip(sources, offsets):
            host[at:at + src.numel()].copy_(src)
        self.timed.append(("D2H", nbytes, time.perf_counter() - start))
        return host, None

    def back(self, host: torch.Tensor, segments: list, after: Any, device: torch.device) -> tuple[list, Any]:
        """Copy each (offset, bytes) segment of `host` into a device buffer of its own; (buffers, token)."""
        start = time.perf_counter()
        buffers = [host[at:at + n].clone() for at, n in segments]
        self.timed.append(("H2D", sum(n for _, n in segments), time.perf_counter() - start))
        return buffers, None

    def compute_waits(self, token: Any) -> None:
        """The compute stream waits for a copy (done already here)."""

    def drain(self) -> None:
        """Every copy in flight has ended before the compute stream's next work."""

    def host_bytes(self, nbytes: int) -> int:
        return nbytes

    held_bytes = None  # host memory: nothing pinned

    def seconds(self) -> list:
        """(direction, bytes, seconds) of every copy so far."""
        return list(self.timed)


class CudaCopies:
    """CUDA and ROCm: pinned host buffers, the device's two copy streams, events (module doc)."""

    cuda = True

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.d2h, self.h2d = copy_streams(device)
        self.timed: list = []  # ("D2H" | "H2D", bytes, start event, end event)

    def _compute(self):
        return torch.cuda.current_stream(self.device)

    def _marks(self, stream) -> tuple:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        return start, end

    def out(self, sources: list, offsets: list, nbytes: int) -> tuple[torch.Tensor, Any]:
        self.d2h.wait_stream(self._compute())  # the F (B) that wrote them has run
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        with torch.cuda.stream(self.d2h):
            start, end = self._marks(self.d2h)
            for src, at in zip(sources, offsets):
                host[at:at + src.numel()].copy_(src, non_blocking=True)
                src.record_stream(self.d2h)  # the allocator reuses it only after this copy
            end.record(self.d2h)
        self.timed.append(("D2H", nbytes, start, end))
        return host, end

    def back(self, host: torch.Tensor, segments: list, after: Any, device: torch.device) -> tuple[list, Any]:
        # allocated in the compute stream's order: the copy writes them only after the compute stream is
        # done with what that memory held before (the wait below)
        buffers = [torch.empty(n, dtype=torch.uint8, device=device) for _, n in segments]
        self.h2d.wait_stream(self._compute())
        if after is not None:
            self.h2d.wait_event(after)
        with torch.cuda.stream(self.h2d):
            start, end = self._marks(self.h2d)
            for buffer, (at, n) in zip(buffers, segments):
                buffer.copy_(host[at:at + n], non_blocking=True)
            end.record(self.h2d)
        self.timed.append(("H2D", sum(n for _, n in segments), start, end))
        return buffers, end

    def compute_waits(self, token: Any) -> None:
        if token is not None:
            self._compute().wait_event(token)

    def drain(self) -> None:
        self._compute().wait_stream(self.d2h)
        self._compute().wait_stream(self.h2d)

    def host_bytes(self, nbytes: int) -> int:
        return pinned_bytes(nbytes)

    @property
    def held_bytes(self) -> Optional[int]:
        """Pinned bytes torch's host allocator holds (blocks in use and cached), where torch says."""
        stats = getattr(torch.cuda, "host_memory_stats", None)
        return None if stats is None else int(stats().get("allocated_bytes.current", 0))

    def seconds(self) -> list:
        """(direction, bytes, seconds) of every copy so far; waits for the last of them."""
        out = []
        for direction, nbytes, start, end in self.timed:
            end.synchronize()
            out.append((direction, nbytes, start.elapsed_time(end) / 1e3))
        return out


def copies_for(device: torch.device):
    return CudaCopies(device) if device.type == "cuda" else HostCopies()


# -- the copy streams, created once per device ----------------------------------------------------

_STREAMS: dict = {}
CUDA_STREAM_NON_BLOCKING = 1  # cudaStreamNonBlocking == hipStreamNonBlocking: no implicit sync with stream 0


def copy_streams(device: torch.device) -> tuple:
    """The device's (device-to-host, host-to-device) copy streams: the same pair for the life of the
    process, outside torch's stream pool where the runtime library can be reached (module doc)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _STREAMS:
        with torch.cuda.device(index):
            pair = tuple(_dedicated_stream(index) for _ in range(2))
        _STREAMS[index] = pair
    return _STREAMS[index]


def _dedicated_stream(index: int):
    created = _create_raw_stream()
    if created is None:
        # drawn once, kept: never a fresh pool stream per step; but one of torch's pool, which NCCL draws
        # from too, so a copy may queue behind a collective's kernel: say so once
        warnings.warn("activation offload: the GPU runtime library (libcudart / libamdhip64) could not be reached to "
                      "create copy streams of its own; using two of torch's pooled streams, which NCCL/RCCL may "
                      "share, so copies can wait behind communication kernels", RuntimeWarning, stacklevel=2)
        return torch.cuda.Stream(index)
    return torch.cuda.ExternalStream(created, device=index)


def _runtime_library() -> Optional[tuple]:
    """(ctypes library, create function name) of the GPU runtime torch loaded, or None."""
    hip = torch.version.hip is not None
    wanted = "libamdhip64.so" if hip else "libcudart.so"
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if wanted in line}
    except OSError:
        paths = set()
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        name = "hipStreamCreateWithFlags" if hip else "cudaStreamCreateWithFlags"
        if hasattr(lib, name):
            return lib, name
    return None


def _create_raw_stream() -> Optional[int]:
    found = _runtime_library()
    if found is None:
        return None
    lib, name = found
    handle = ctypes.c_void_p()
    if getattr(lib, name)(ctypes.byref(handle), ctypes.c_uint(CUDA_STREAM_NON_BLOCKING)) != 0 or not handle.value:
        return None
    return handle.value  # never destroyed: the process keeps its copy streams


def copy_seconds(nbytes: int, device: torch.device, repeats: int = 5) -> float:
    """Seconds one lane takes for `nbytes` copied alone: the slower of a device-to-host and a
    host-to-device copy (median of `repeats`), on the device's copy streams. A benchmark's probe
    (the runtime measures its own copies, `runtime.offload.measured_bandwidth`)."""
    import statistics

    nbytes = max(1, int(nbytes))
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    copies = copies_for(device)
    times = []
    for _ in range(repeats + 1):  # the first round warms up
        copies.timed.clear()
        host, done = copies.out([src], [0], nbytes)
        copies.back(host, [(0, nbytes)], done, device)
        times.append(max(seconds for _, _, seconds in copies.seconds()))
    return max(statistics.median(times[1:]), 1e-9)
