"""`gc_paused`: run a function with Python's cyclic garbage collector switched off."""
from __future__ import annotations

import gc
from functools import wraps
from typing import Callable, TypeVar

T = TypeVar("T")


def gc_paused(fn: Callable[..., T]) -> Callable[..., T]:
    """Run `fn` with the cyclic garbage collector off (if it was on).

    The planner's passes build hundreds of thousands of small tuples and lists
    that live until the call returns; every automatic collection would traverse
    all of them again. They form no reference cycles, so reference counting
    frees everything as usual."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return wrapper
