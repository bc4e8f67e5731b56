"""Hand-off between the optimizer and the next step: a post-validation waiting
to run (set by primus_megatron.optim, taken by the executor at the end of a
rank's prefix)."""
from __future__ import annotations

from typing import Callable, Optional

_PENDING: Optional[Callable[[], bool]] = None


def set_pending(validate: Optional[Callable[[], bool]]) -> None:
    """`validate()` returns True when the validated step changed the parameters
    (the prefix of the next step must then be redone)."""
    global _PENDING
    _PENDING = validate


def take_pending() -> Optional[Callable[[], bool]]:
    global _PENDING
    validate, _PENDING = _PENDING, None
    return validate
