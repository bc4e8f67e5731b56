"""benchmarks/fatbin.py, which cuts TE's core library to the H200's GPU code for `make gpu-te-bundle`, on
fat-binary sections made here (the real library's cut is checked against cuobjdump in
tests/test_gpu_te_bundle.py, where a bundle is built)."""
from __future__ import annotations

import os
import struct
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import fatbin  # noqa: E402

HEADER = 64  # an entry's header, as nvcc writes it for these kinds


def entry(kind: int, sm: int, payload: bytes, flags: int = 0x11) -> bytes:
    head = bytearray(HEADER)
    struct.pack_into("<HHIQ", head, 0, kind, 0x0101, HEADER, len(payload))
    struct.pack_into("<I", head, 28, sm)
    struct.pack_into("<Q", head, 40, flags)
    return bytes(head) + payload


def container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, len(body)) + body


FIRST = [entry(fatbin.PTX, 80, b"p" * 16), entry(fatbin.ELF, 80, b"a" * 24), entry(fatbin.ELF, 90, b"b" * 32),
         entry(fatbin.ELF, 90, b"c" * 8, flags=0x100011)]  # the last an sm_90a cubin
SECOND = [entry(fatbin.ELF, 100, b"d" * 40), entry(fatbin.ELF, 90, b"e" * 16)]
PADDING = 16  # between containers, as the linker aligns them


def section() -> bytes:
    return container(*FIRST) + bytes(PADDING) + container(*SECOND)


def test_containers_lists_every_entry_in_order_past_padding():
    found = [(pos, [(e.kind, e.sm) for e in entries]) for pos, _whole, entries in fatbin.containers(section())]
    assert found == [(0, [(1, 80), (2, 80), (2, 90), (2, 90)]),
                     (len(container(*FIRST)) + PADDING, [(2, 100), (2, 90)])]


def test_keep_only_rewrites_each_container_in_place_and_zeroes_the_rest():
    cut = bytearray(section())
    counts = fatbin.keep_only(cut, lambda e: e.kind == fatbin.ELF and e.sm == 90)
    assert counts == {"kept": 3, "dropped": 3}

    def shrunk(entries: list, whole: int) -> bytes:  # the kept entries behind a new header, zeros after
        kept = container(*entries)
        return kept + bytes(whole - len(kept))

    assert bytes(cut) == (shrunk(FIRST[2:], len(container(*FIRST))) + bytes(PADDING)
                          + shrunk(SECOND[1:], len(container(*SECOND))))
    assert [[(e.sm, e.flags) for e in es] for _p, _w, es in fatbin.containers(bytes(cut))] == [
        [(90, 0x11), (90, 0x100011)], [(90, 0x11)]]


def test_a_container_left_empty_keeps_a_valid_header():
    cut = bytearray(section())
    fatbin.keep_only(cut, lambda e: e.sm == 120)
    assert [(pos, es) for pos, _w, es in fatbin.containers(bytes(cut))] == [
        (0, []), (len(container(*FIRST)) + PADDING, [])]


def test_bytes_that_are_no_container_are_refused():
    data = section()
    with pytest.raises(ValueError, match="no fat binary container at section offset 0"):
        list(fatbin.containers(b"junk" + data[4:]))
    broken = bytearray(data)
    struct.pack_into("<Q", broken, 16 + 8, 10**9)  # the first entry's payload runs past its container
    with pytest.raises(ValueError, match="unreadable fat binary entry"):
        list(fatbin.containers(bytes(broken)))
