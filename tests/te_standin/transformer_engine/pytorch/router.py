"""Stand-in for TE v2.11 ``pytorch/router.py`` (commit c188b533): the fused MoE router functions
megatron-core imports unconditionally for TE >= 2.7 (extensions/transformer_engine.py 2488-2493).
MoE routing is outside what the stand-in reproduces: calling them raises."""


def _not_reproduced(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"the TransformerEngine stand-in does not reproduce {name} (MoE routing)")

    fn.__name__ = name
    return fn


fused_topk_with_score_function = _not_reproduced("fused_topk_with_score_function")
fused_compute_score_for_moe_aux_loss = _not_reproduced("fused_compute_score_for_moe_aux_loss")
fused_moe_aux_loss = _not_reproduced("fused_moe_aux_loss")
