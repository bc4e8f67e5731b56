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
  (`ATen/core/CachingHostAllocator.h`, `PowerOf2Ceil`), per size: one pinned buffer per offloaded
  F held about twice the bytes in use on an H200 (BENCHMARKS.md). So host buffers come from a
  `PinnedArena` per device instead: a few large power-of-two slabs (no rounding lost), carved for
  each buffer and reused once the copy that last touched a piece has run; what it holds is reported
  (`held`) beside the bytes in use.
- Device memory: a block used on a second stream and marked with `record_stream` is, once freed,
  reused only after the work queued on that stream at the free has run (an event the allocator
  checks at each allocation, and waits for before raising out-of-memory:
  `c10/cuda/CUDACachingAllocator.cpp`), so the offloader drops a moved storage as its copy out is
  queued, without waiting.
"""
from __future__ import annotations

import ctypes
import time
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

    def give_back(self, host: torch.Tensor, token: Any) -> None:
        """The host pool's buffer goes with its last reference."""

    def host_bytes(self, nbytes: int) -> int:
        return nbytes

    held_bytes = 0  # nothing is held beyond what is in use

    def seconds(self) -> list:
        """(direction, bytes, seconds) of every copy so far."""
        return list(self.timed)


class CudaCopies:
    """CUDA and ROCm: pinned host buffers from the device's arena, its two copy streams, events (module
    doc)."""

    cuda = True

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.d2h, self.h2d = copy_streams(device)
        self.arena = pinned_arena(device)
        self.timed: list = []  # ("D2H" | "H2D", bytes, start event, end event)

    def _compute(self):
        return torch.cuda.current_stream(self.device)

    def _marks(self, stream) -> tuple:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        return start, end

    def out(self, sources: list, offsets: list, nbytes: int) -> tuple[torch.Tensor, Any]:
        self.d2h.wait_stream(self._compute())  # the F (B) that wrote them has run
        host = self.arena.take(nbytes)
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

    def give_back(self, host: torch.Tensor, token: Any) -> None:
        """`host` is free once the copy `token` ends (the last copy that reads or writes it)."""
        self.arena.give(host, None if token is None else token.query)

    def host_bytes(self, nbytes: int) -> int:
        return nbytes

    @property
    def held_bytes(self) -> int:
        return self.arena.held

    def seconds(self) -> list:
        """(direction, bytes, seconds) of every copy so far; waits for the last of them."""
        out = []
        for direction, nbytes, start, end in self.timed:
            end.synchronize()
            out.append((direction, nbytes, start.elapsed_time(end) / 1e3))
        return out


def copies_for(device: torch.device):
    return CudaCopies(device) if device.type == "cuda" else HostCopies()


# -- pinned host memory, one arena per device ------------------------------------------------------

class PinnedArena:
    """Host buffers carved from a few pinned slabs (module doc). A slab is a power of two (what torch's
    host allocator would round it to anyway) of at least `min_slab` bytes and four times the largest
    request so far, so pieces pack with little left over. A piece given back is reused once its
    `done()` says the copy that last touched it has ended (the host never waits: a piece still in
    flight is skipped). `pin(n)`: n pinned bytes (a test gives plain ones)."""

    def __init__(self, pin, min_slab: int = 64 << 20) -> None:
        self.pin, self.min_slab = pin, min_slab
        self.slabs: list = []  # uint8 tensors
        self.free: list = []  # [slab, start, end), sorted
        self.pending: list = []  # (done, slab, start, end): given back, the copy may still run
        self.pieces: dict = {}  # data_ptr of a piece handed out -> (slab, start, end)
        self.largest = 0
        self.in_use = 0  # handed out
        self.peak_in_use = 0
        self.peak_busy = 0  # handed out or given back with its copy still running

    @property
    def held(self) -> int:
        return sum(s.numel() for s in self.slabs)

    def take(self, nbytes: int) -> torch.Tensor:
        n = aligned(max(1, nbytes))
        self.largest = max(self.largest, n)
        self._reap()
        fits = [(end - start, i) for i, (slab, start, end) in enumerate(self.free) if end - start >= n]
        if not fits:
            size = pinned_bytes(max(self.min_slab, 2 * self.largest, n))
            self.slabs.append(self.pin(size))
            self.free.append((len(self.slabs) - 1, 0, size))
            fits = [(size, len(self.free) - 1)]
        _, i = min(fits)  # the tightest fit
        slab, start, end = self.free.pop(i)
        if end - start > n:
            self.free.append((slab, start + n, end))
            self.free.sort()
        piece = self.slabs[slab][start:start + n]
        self.pieces[piece.data_ptr()] = (slab, start, start + n)
        self.in_use += n
        self.peak_in_use = max(self.peak_in_use, self.in_use)
        self.peak_busy = max(self.peak_busy, self.in_use + sum(end - start for _, _, start, end in self.pending))
        return piece[:nbytes]

    def give(self, piece: torch.Tensor, done=None) -> None:
        slab, start, end = self.pieces.pop(piece.data_ptr())
        self.in_use -= end - start
        self.pending.append((done, slab, start, end))

    def _reap(self) -> None:
        """Pieces whose copies have ended go back to the free list, merged with their neighbours."""
        still = []
        for done, slab, start, end in self.pending:
            if done is None or done():
                self.free.append((slab, start, end))
            else:
                still.append((done, slab, start, end))
        self.pending = still
        self.free.sort()
        merged: list = []
        for slab, start, end in self.free:
            if merged and merged[-1][0] == slab and merged[-1][2] == start:
                merged[-1] = (slab, merged[-1][1], end)
            else:
                merged.append((slab, start, end))
        self.free = merged


_ARENAS: dict = {}


def pinned_arena(device: torch.device) -> PinnedArena:
    """The device's arena, for the life of the process."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _ARENAS:
        _ARENAS[index] = PinnedArena(lambda n: torch.empty(n, dtype=torch.uint8, pin_memory=True))
    return _ARENAS[index]


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
        return torch.cuda.Stream(index)  # drawn once, kept: never a fresh pool stream per step
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
