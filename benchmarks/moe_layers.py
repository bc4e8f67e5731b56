"""MoE layers' costs from their FLOPs, and what the experts' weight gradients in W (not B) buy:
simulated bubble and peak activation memory of every schedule at pp 8 and 16 (issue 38).

    python benchmarks/moe_layers.py            # prints the section and replaces it in docs/benchmarks/moe-and-pairs.md

Per token and layer (forward FLOPs, 2 per multiply-add; s the sequence, causal attention):
* linear layers L: 2 x in x out each (attention projections, the router, each of the top-k routed
  experts' three SwiGLU GEMMs, shared experts);
* attention core A: QK^T and AV over on average s/2 keys: s x heads x (qk head dim + v head dim).
F = L + A; B = L (input gradients) + 2A (the core's backward) + the router's weight gradient; W = L
less the router (weight gradients). With the
routed experts' W in B (grouped experts before issue 38): B += W_experts, W -= W_experts. The router
(a plain parameter) and norms get theirs in B either way.

Activation memory per token (elements saved for backward, as in Korthikanti et al.): the norms'
inputs and outputs, each linear layer's input, attention's q, k, v and output, the routed experts'
permuted inputs (top-k x h), SwiGLU inputs (top-k x 2f) and fc2 inputs (top-k x f), the shared
experts' alike. What B keeps for W (its W share) is every deferred linear layer's input; the
planner's memory model takes it as mem_w = -share, mem_b = -(1 - share), mem_f = 1 (one rank's layers
of one microbatch). Gradient outputs kept for W are left out (the same for every schedule).

Times are F-normalised (F = 1); comm 0. Peak memory in mem_f units (one rank's activations of one
microbatch); 1F1B holds pp of them on its first rank.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as C  # noqa: E402

SEQ = 4096


@dataclass(frozen=True)
class Layer:
    name: str
    hidden: int
    attn_linear: tuple  # (in, out) of each attention projection
    attn_core: tuple  # (heads, qk head dim, v head dim)
    experts: int
    topk: int
    ffn: int  # one routed expert's FFN width
    shared_ffn: int  # the shared experts' FFN width in all (0: none)
    attn_saved: int  # elements per token attention saves for backward (module doc)
    attn_w_inputs: int  # of which linear inputs (kept for W)

    def flops(self, seq: int = SEQ) -> dict:
        h = self.hidden
        attn = sum(2 * i * o for i, o in self.attn_linear)
        heads, qk, v = self.attn_core
        core = seq * heads * (qk + v)
        router = 2 * h * self.experts
        routed = self.topk * 3 * 2 * h * self.ffn
        shared = 3 * 2 * h * self.shared_ffn
        linear = attn + router + routed + shared
        # the router's weight gradient comes from autograd in B
        return {"F": linear + core, "B": linear + 2 * core + router, "W": linear - router, "W_experts": routed,
                "router": router}

    def memory(self) -> dict:
        h, k, f, sf = self.hidden, self.topk, self.ffn, self.shared_ffn
        moe = 2 * h + k * h + k * 2 * f + k * f + (2 * sf + sf if sf else 0)  # norm in/out, routed, shared
        saved = self.attn_saved + moe
        w_experts = k * h + k * f  # the routed experts' fc1 and fc2 inputs
        w_rest = self.attn_w_inputs + ((h + sf) if sf else 0)  # attention projections' inputs, shared experts'
        return {"saved": saved, "share_in_w": (w_rest + w_experts) / saved, "share_in_b": w_rest / saved}


QWEN3_30B_A3B = Layer("Qwen3-30B-A3B-like", 2048, ((2048, 4096 + 2 * 512), (4096, 2048)), (32, 128, 128), 128, 8,
                      768, 0, attn_saved=2048 + 2048 + (4096 + 1024) + 4096, attn_w_inputs=2048 + 4096)
# MLA without a query low-rank: q (16 x 192), kv_a (512 + 64 rope), kv_b (512 -> 16 x (128 + 128)), o; 2 shared experts
DEEPSEEK_V2_LITE = Layer("DeepSeek-V2-Lite-like", 2048,
                         ((2048, 16 * 192), (2048, 576), (512, 16 * 256), (16 * 128, 2048)), (16, 192, 128), 64, 6,
                         1408, 2 * 1408, attn_saved=2048 + 2048 + 576 + 512 + (3072 + 3072 + 2048) + 2048,
                         attn_w_inputs=2048 + 512 + 2048)
LAYERS = (QWEN3_30B_A3B, DEEPSEEK_V2_LITE)
SCHEDULES = ("1f1b", "interleaved-1f1b", "zb-h1", "zb-auto@1p", "zb-auto@2p", "zbv", "v-half")


def costs_for(layer: Layer, experts_in_w: bool):
    from primus_megatron import schedules as S

    fl, mem = layer.flops(), layer.memory()
    b, w = fl["B"], fl["W"]
    if not experts_in_w:
        b, w = b + fl["W_experts"], w - fl["W_experts"]
    share = mem["share_in_w"] if experts_in_w else mem["share_in_b"]
    return S.Costs(f=1.0, b=b / fl["F"], w=w / fl["F"], mem_f=1.0, mem_b=-(1.0 - share), mem_w=-share)


def simulate(name: str, pp: int, m: int, costs) -> tuple[float, float]:
    """(bubble, peak memory) of schedule `name` (zb-auto@Kp: memory limit K x pp)."""
    from primus_megatron import schedules as S

    limit = None
    if "@" in name:
        name, k = name.split("@")
        limit = float(k[:-1]) * pp
    sched = S.generate(name, pp, m, costs=costs, memory_limit=limit)
    result = S.simulate(sched, costs)
    busy = sum(result.busy) if isinstance(result.busy, list) else result.busy
    return max(0.0, 1.0 - busy / (pp * result.makespan)), result.max_peak_memory


def rows(pps=(8, 16)) -> list:
    out = []
    for layer in LAYERS:
        for pp in pps:
            for m in (2 * pp, 4 * pp):
                cells = {}
                for experts_in_w in (False, True):
                    costs = costs_for(layer, experts_in_w)
                    for name in SCHEDULES:
                        cells[(name, experts_in_w)] = simulate(name, pp, m, costs)
                for name in SCHEDULES:
                    (b0, m0), (b1, m1) = cells[(name, False)], cells[(name, True)]
                    out.append([layer.name, pp, m, name, f"{b0:.3f} / {m0:.2f}", f"{b1:.3f} / {m1:.2f}"])
    return out


def summary() -> list:
    """What the table shows at pp=8, m=32 (the issue's target): zbv against interleaved 1F1B."""
    out = []
    for layer in LAYERS:
        inter = simulate("interleaved-1f1b", 8, 32, costs_for(layer, True))
        zbv_b, zbv_w = (simulate("zbv", 8, 32, costs_for(layer, w)) for w in (False, True))
        h1_b, h1_w = (simulate("zb-h1", 8, 32, costs_for(layer, w)) for w in (False, True))
        out.append(f"* {layer.name}, pp=8, m=32: with the experts' weight gradients in W, zbv's bubble falls from "
                   f"{zbv_b[0]:.3f} to {zbv_w[0]:.3f} and zb-h1's from {h1_b[0]:.3f} to {h1_w[0]:.3f} (at 1F1B's "
                   f"memory, {zbv_w[1]:.0f} units), against megatron's interleaved 1F1B at {inter[0]:.3f} holding "
                   f"{inter[1]:.1f}.")
    return out


def cost_rows() -> list:
    out = []
    for layer in LAYERS:
        fl, mem = layer.flops(), layer.memory()
        for experts_in_w in (False, True):
            c = costs_for(layer, experts_in_w)
            out.append([layer.name, "W" if experts_in_w else "B", f"{fl['F'] / 1e6:.1f}",
                        f"{fl['W_experts'] / fl['W']:.2f}", f"{fl['router'] / (fl['W'] + fl['router']):.4f}",
                        f"{c.b:.3f}", f"{c.w:.3f}", f"{-c.mem_w:.2f}"])
    return out


def main(argv=None) -> int:
    args = C.parser(__doc__).parse_args(argv)
    text = C.section(
        C.command_line("benchmarks/moe_layers.py", argv),
        f"Simulated, not measured: per-layer costs from FLOPs at sequence {SEQ} (the script's docstring has the "
        "formulas and the memory model). Per layer: forward MFLOPs per token, the routed experts' share of the "
        "weight-gradient FLOPs, B and W in F units and the share of an F's activations B keeps for W, with the "
        "routed experts' weight gradients in B (grouped experts before issue 38) and in W:",
        C.table(["layer", "experts' W in", "F MFLOP/token", "experts' share of W", "router's (always in B)", "B", "W",
                 "W share of memory"], cost_rows()),
        "Bubble / peak activation memory (mem_f units) of each schedule, experts' W in B -> in W (zb-auto@Kp: "
        "planned under a memory limit of K x pp):",
        C.table(["layer", "pp", "m", "schedule", "experts' W in B: bubble / peak", "in W: bubble / peak"], rows()),
        "\n".join(summary()))
    C.publish(args, "## MoE layers: the experts' weight gradients in B and in W (simulated, pp 8 and 16)", text,
              "moe_layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
