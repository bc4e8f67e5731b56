"""benchmarks/dsv3_layers.py's cost model: the pieces land on the stages the docstring says, with the costs
its formulas give (checked against numbers worked by hand, not the script's output)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import dsv3_layers as D  # noqa: E402

from primus_megatron.schedules.layer_split import LayerSplit  # noqa: E402


def test_the_moe_layers_active_ffn_is_the_dense_layers():
    """DeepSeek-V3's 8 routed experts + 1 shared expert of 2048 are as wide as its dense SwiGLU of 18432:
    the two layers' F differ by the router's 2 x 7168 x 256 FLOPs per token alone."""
    moe, dense = D.MOE.flops(), D.DENSE_LAYER.flops()
    assert moe["F"] - dense["F"] == 2 * 7168 * 256
    assert D.layer_piece(D.MOE, True).f == 1.0  # the unit


def test_the_head_with_mtp_is_two_output_passes_a_projection_and_a_moe_layer():
    unit, out, proj = D.MOE.flops()["F"], 2 * 7168 * 129280, 2 * 2 * 7168 * 7168
    assert D.head_piece(False).f == pytest.approx(out / unit)
    assert D.head_piece(True).f == pytest.approx((2 * out + proj) / unit + 1.0)


@pytest.mark.parametrize("chunks", [1, 2])
def test_stages_hold_their_layers_the_dense_one_first_and_the_head_last(chunks):
    pieces = D.stage_pieces(LayerSplit(D.NUM_LAYERS), 8, chunks, mtp=True)
    per_stage = D.NUM_LAYERS // (8 * chunks)
    dense, moe, head = D.layer_piece(D.DENSE_LAYER, False), D.layer_piece(D.MOE, True), D.head_piece(True)
    assert len(pieces) == 8 * chunks
    assert pieces[0].moe == per_stage - 1 and pieces[0].f == pytest.approx(dense.f + (per_stage - 1) * moe.f)
    assert all(p.f == pytest.approx(per_stage * moe.f) for p in pieces[1:-1])
    assert pieces[-1].f == pytest.approx(per_stage * moe.f + head.f) and pieces[-1].moe == per_stage + 1


def test_the_all_to_all_is_added_to_f_and_b_of_moe_layers_only():
    split, x = LayerSplit(D.NUM_LAYERS), 0.5
    bare, costs = D.costs_of(split, 8, 2, True, 0.0), D.costs_of(split, 8, 2, True, x)
    pieces = D.stage_pieces(split, 8, 2, True)
    assert costs.a2a == tuple(x * p.moe for p in pieces)
    assert all(f == pytest.approx(f0 + x * p.moe) for f, f0, p in zip(costs.f, bare.f, pieces))
    assert costs.w == bare.w
