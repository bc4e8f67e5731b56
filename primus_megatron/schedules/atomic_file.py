"""`atomic_write`: replace a file's content all at once (plots, traces, profiles, BENCHMARKS.md)."""
from __future__ import annotations

import os
import tempfile


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write `data` to `path` through a temporary file in the same folder and a rename,
    so that `path` either keeps its old content or gets the complete new one."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix="-" + os.path.basename(path), dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
