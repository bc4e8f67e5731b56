"""`pretrain_gpt.py`'s entry point: the arguments are parsed and checked before torch and
megatron-core are imported, so bad input costs a fraction of a second (not the 3-9 s of
imports) and ends with one sentence and exit status 2 on rank 0."""
from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from .arguments import ConfigError, parse_run


def _launch_environment() -> None:
    """A plain `python pretrain_gpt.py` is a world of one; more ranks need a launcher."""
    if "MASTER_ADDR" in os.environ:
        return
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("WORLD_SIZE is set but MASTER_ADDR is not: launch with torchrun (or srun + torchrun)")
    # port 0: rank 0 hosts its store on a port the kernel picks, and no other process needs it
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="0", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args, spec = parse_run(argv)
        _launch_environment()
    except ConfigError as exc:
        if os.environ.get("RANK", "0") == "0":
            print(f"pretrain_gpt.py: error: {exc}", file=sys.stderr)
        return 2
    from .pretrain import run  # torch, megatron-core and the runtime: only for arguments that hold

    return run(args, spec)
