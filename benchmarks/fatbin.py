"""The CUDA fat binaries inside a shared library: list their entries, keep only some architectures.

A library built by nvcc holds its GPU code in the ELF section `.nv_fatbin`: a run of containers
(one per translation unit), each a 16-byte header (magic 0xBA55ED50, version, header size, size of
what follows) and entries (kind 1 = PTX, 2 = ELF/cubin), each with its own header (kind, header
size, payload size, the target's SM number at byte 28, flags) and payload. The host code registers
each container by its address (`.nvFatBinSegment`), so a container must stay where it is;
`keep_only` rewrites each one in place to hold only the entries asked for, in their order, and
zeroes the rest of its bytes, which then cost nothing compressed (and a sparse archive stores no
bytes for them). The entries are copied byte for byte (compressed or not): nothing is decoded.

Written from the layout seen in TransformerEngine 2.11's library and checked against CUDA's
own `cuobjdump --list-elf/--list-ptx` (tests/test_gpu_te_bundle.py); no other project's code.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, Iterator

MAGIC = 0xBA55ED50
_MAGIC_BYTES = struct.pack("<I", MAGIC)
PTX, ELF = 1, 2
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
_ENTRY = struct.Struct("<HHIQIIHHI")  # kind, version, header size, payload size, ..., sm at byte 28


@dataclass(frozen=True)
class Entry:
    kind: int  # PTX or ELF
    sm: int  # 90 for sm_90 and sm_90a alike
    flags: int
    offset: int  # of the entry's header, from the section's start
    size: int  # header and payload


def section(path: str, name: str = ".nv_fatbin") -> tuple[int, int]:
    """(file offset, size) of an ELF64 little-endian file's section `name`."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            raise ValueError(f"{path} is not a little-endian ELF64 file")
        shoff, = struct.unpack_from("<Q", head, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        headers = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
        f.seek(headers[shstrndx][4])
        names = f.read(headers[shstrndx][5])
    for name_at, _type, _flags, _addr, offset, size in headers:
        if names[name_at:names.index(b"\0", name_at)].decode() == name:
            return offset, size
    raise ValueError(f"{path} has no {name} section")


def containers(data: bytes) -> Iterator[tuple[int, int, list[Entry]]]:
    """(offset, whole size, entries) of each container in a `.nv_fatbin` section's bytes; zero padding
    between containers is skipped."""
    pos = 0
    while pos + _CONTAINER.size <= len(data):
        magic, _version, head, size = _CONTAINER.unpack_from(data, pos)
        if magic != MAGIC:
            # zeros up to the next container: alignment padding, or what keep_only zeroed
            found = data.find(_MAGIC_BYTES, pos)
            end = len(data) if found < 0 else found
            if data.count(0, pos, end) != end - pos:
                raise ValueError(f"no fat binary container at section offset {pos}")
            pos = end
            continue
        yield pos, head + size, list(_entries(data, pos + head, pos + head + size))
        pos += head + size


def _entries(data: bytes, start: int, end: int) -> Iterator[Entry]:
    at = start
    while at < end:
        kind, _version, head, payload, _a, _b, _minor, _major, sm = _ENTRY.unpack_from(data, at)
        flags, = struct.unpack_from("<Q", data, at + 40)
        if kind not in (PTX, ELF) or at + head + payload > end:
            raise ValueError(f"unreadable fat binary entry at section offset {at}")
        yield Entry(kind, sm, flags, at, head + payload)
        at += head + payload


def keep_only(data: bytearray, keep: Callable[[Entry], bool]) -> dict:
    """Rewrite every container of a `.nv_fatbin` section in place to hold only the entries `keep` accepts;
    what each container no longer uses is zeroed. Returns counts of what was kept and dropped."""
    kept = dropped = 0
    for pos, whole, entries in list(containers(bytes(data))):
        magic, version, head, _size = _CONTAINER.unpack_from(data, pos)
        body = b"".join(bytes(data[e.offset:e.offset + e.size]) for e in entries if keep(e))
        data[pos:pos + whole] = bytes(whole)
        # a container left empty keeps a valid header: the host code still registers it at load
        _CONTAINER.pack_into(data, pos, magic, version, head, len(body))
        data[pos + head:pos + head + len(body)] = body
        kept += sum(1 for e in entries if keep(e))
        dropped += sum(1 for e in entries if not keep(e))
    return {"kept": kept, "dropped": dropped}


def listing(path: str) -> list[tuple[str, int]]:
    """('elf' or 'ptx', SM number) of every entry of a library's fat binaries, in order."""
    offset, size = section(path)
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(size)
    return [("elf" if e.kind == ELF else "ptx", e.sm) for _, _, entries in containers(data) for e in entries]
