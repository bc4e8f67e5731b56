"""The planner: schedule IR, generators, registry, lowering, validation, simulation.

Pure Python: nothing here imports torch.
"""
from . import auto, balance, offload, optimality
from .costs import UNIT, Costs, StageCosts
from .errors import ScheduleError
from .ir import B, BW, F, LOOP, V, W, Op, Pair, Schedule, owner_of, stage_of
from .lowering import Batch, Lowered, Message, Recv, Send, lower
from .registry import generate, info, names, register
from .simulation import SimResult, simulate
from .validation import validate

__all__ = [
    "B", "BW", "F", "W", "LOOP", "V", "Op", "Pair", "Schedule", "Costs", "StageCosts", "UNIT", "ScheduleError",
    "Batch", "Lowered", "Message", "Send", "Recv", "lower", "generate", "info", "names", "register",
    "SimResult", "simulate", "validate", "owner_of", "stage_of",
]
