"""Stand-in for TE v2.11 ``transformer_engine/debug/pytorch/debug_state.py`` (commit c188b533):
``TEDebugState`` (lines 12-70). TE turns debug mode on when nvdlfw_inspect's debug manager is
initialised (``initialize``, lines 22-40); the stand-in has no nvdlfw_inspect, so a test sets
``debug_enabled`` itself. In debug mode TE refuses delayed weight gradients in every forward
(``module/base.py`` ``is_debug_iter``, lines 1533-1536); its debug quantizers are not reproduced."""
from __future__ import annotations

import sys


class TEDebugState:
    layer_count = 1
    layers_initialized: dict = {}
    weight_tensor_tp_group_reduce = True
    debug_enabled = None

    @classmethod
    def initialize(cls) -> None:
        if "nvdlfw_inspect" in sys.modules:
            raise NotImplementedError("the TransformerEngine stand-in does not reproduce nvdlfw_inspect debugging")

    @classmethod
    def get_layer_count(cls) -> int:
        count = cls.layer_count
        cls.layer_count += 1
        return count

    @classmethod
    def get_iteration(cls) -> int:
        return 0
