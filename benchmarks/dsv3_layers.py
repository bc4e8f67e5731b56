"""DeepSeek-V3-like layers on a pipeline, simulated (issue 57): DualPipeV, zbv with pairs and zb-h1 against
megatron's combined 1F1B and interleaved 1F1B, at pp 8 and 16, m = 2p and 4p, with the expert all-to-all
at 0.5x and 1x of F's compute, and the MTP layer's extra cost on the last stage balanced and not.

    python benchmarks/dsv3_layers.py     # prints the section and writes docs/benchmarks/deepseek-v3.md

The model: DeepSeek-V3's layer shapes (hidden 7168, MLA with 128 heads, query low rank 1536, key/value
low rank 512, head dims 128 + 64 rope and 128 for values; 256 routed experts of width 2048, top-8, one
shared expert of 2048; vocabulary 129280; sequence 4096), 64 layers (DeepSeek-V3 has 61: 64 splits
evenly at pp 8 and 16 under one and two chunks per rank), the first dense (SwiGLU of width 18432; DeepSeek-V3
has 3, the scaled-down recipe 1), one MTP layer. Per token (forward FLOPs, 2 per multiply-add; the
formulas of benchmarks/moe_layers.py):
* a layer: its linear layers 2 x in x out each (MLA's q_a, q_b, kv_a, kv_b and output projections; the
  router; each of the top-k routed experts' and the shared expert's three SwiGLU GEMMs; or the dense
  SwiGLU) plus the attention core s x heads x (qk + v head dims) (causal: s/2 keys on average);
  B = linear + 2 x core + router, W = linear - router (every weight gradient in W);
* the head on the last stage: the output layer 2 x h x vocab (F; B and W the same) and, with MTP, the MTP
  layer (one MoE layer), its projection of [h; embedding] 2 x 2h x h and its own pass through the shared
  output layer: 2 x 2 h x vocab F in all;
* the embedding lookup: free.
Times are in units of a MoE layer's F. The all-to-all (dispatch and combine) adds x of a MoE layer's F
compute to each F and each B of every MoE layer (the MTP layer's included; the dense layer has none), and
schedules with overlapped pairs hide it under the other half's compute (`schedules.costs`).

Activation memory per token (elements saved for backward, as moe_layers.py counts them; the
cross-entropy keeps the fp32 softmax, 2 elements of the vocabulary per token and head), in units of an
average rank's layers' activations for one microbatch; peak is the largest rank's. W frees what B keeps
for the weight gradients (every linear layer's input).

Layer splits: `even`, the layers split evenly (what megatron does without split options: the head and MTP
on top of the last stage's layers); `balanced`, the fastest of the splits `primus-pipeline balance` and
`--pipeline-balance` consider (megatron's first/last-stage counts, the embedding/loss accounting, and
layouts `--pipeline-model-parallel-layout` takes that even out the ranks' work: `schedules.balance`),
each schedule on its own best, megatron's two included (a layout is theirs too).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as C  # noqa: E402
import moe_layers as L  # noqa: E402
import pairs_simulated as P  # noqa: E402

TITLE = "## DeepSeek-V3-like layers: V schedules against megatron's combined 1F1B (simulated, pp 8 and 16)"
PAGE = "docs/benchmarks/deepseek-v3.md"
NUM_LAYERS, DENSE, VOCAB, HIDDEN = 64, 1, 129280, 7168
HEADS, Q_LORA, KV_LORA, QK, ROPE, V = 128, 1536, 512, 128, 64, 128
# MLA's projections: q_a, q_b, kv_a (latent + shared rope key), kv_b, output
MLA = ((HIDDEN, Q_LORA), (Q_LORA, HEADS * (QK + ROPE)), (HIDDEN, KV_LORA + ROPE), (KV_LORA, HEADS * (QK + V)),
       (HEADS * V, HIDDEN))
# norm in, norm out (q_a's and kv_a's input), q_a out (q norm), q_b in, kv_a out, kv_b in, q, k, v, output in
MLA_SAVED = (2 * HIDDEN + 2 * Q_LORA + KV_LORA + ROPE + KV_LORA + 2 * HEADS * (QK + ROPE) + HEADS * V
             + HEADS * V)
MLA_W_INPUTS = HIDDEN + Q_LORA + KV_LORA + HEADS * V
MOE = L.Layer("MoE", HIDDEN, MLA, (HEADS, QK + ROPE, V), 256, 8, 2048, 2048, attn_saved=MLA_SAVED,
              attn_w_inputs=MLA_W_INPUTS)
# the dense layer as a "MoE" of one expert always chosen (no router): its SwiGLU MLP
DENSE_LAYER = L.Layer("dense", HIDDEN, MLA, (HEADS, QK + ROPE, V), 0, 1, 18432, 0, attn_saved=MLA_SAVED,
                      attn_w_inputs=MLA_W_INPUTS)
SCHEDULES = ("dualpipev", "zbv", "zb-h1", P.COMBINED, "interleaved-1f1b")
CHUNKS = {"zb-h1": 1}  # every other schedule has 2 chunks per rank
PLACEMENT = {"dualpipev": "v", "zbv": "v"}


@dataclass(frozen=True)
class Piece:
    """F, B, W (MoE-F units), a2a (MoE layers' count), saved and kept-for-W activation elements per token."""

    f: float
    b: float
    w: float
    moe: float
    saved: float
    w_saved: float

    def __add__(self, other: "Piece") -> "Piece":
        return Piece(*(a + b for a, b in zip(self.__dict__.values(), other.__dict__.values())))

    def __mul__(self, k: float) -> "Piece":
        return Piece(*(a * k for a in self.__dict__.values()))


def layer_piece(layer: L.Layer, moe: bool) -> Piece:
    fl, mem, unit = layer.flops(), layer.memory(), MOE.flops()["F"]
    return Piece(fl["F"] / unit, fl["B"] / unit, fl["W"] / unit, float(moe), mem["saved"],
                 mem["saved"] * mem["share_in_w"])


def head_piece(mtp: bool) -> Piece:
    """The output layer and loss, and with `mtp` the MTP layer, its projection and its own output pass."""
    unit, out = MOE.flops()["F"], 2 * HIDDEN * VOCAB
    head = Piece(out / unit, out / unit, out / unit, 0.0, HIDDEN + 2 * VOCAB, HIDDEN)
    if not mtp:
        return head
    proj = 2 * 2 * HIDDEN * HIDDEN
    extra = Piece(proj / unit, proj / unit, proj / unit, 0.0, 2 * HIDDEN + 2 * HIDDEN, 2 * HIDDEN)  # norms, proj
    return head * 2 + extra + layer_piece(MOE, True)


def stage_pieces(split, pp: int, chunks: int, mtp: bool) -> list:
    """Each global stage's Piece: its layers (the first DENSE dense), the head (with MTP) on the last."""
    from primus_megatron.schedules.layer_split import stage_layers

    counts, out, start = stage_layers(split, pp, chunks), [], 0
    dense, moe = layer_piece(DENSE_LAYER, False), layer_piece(MOE, True)
    for s, n in enumerate(counts):
        k = max(0, min(n, DENSE - start))
        piece = dense * k + moe * (n - k)
        out.append(piece + head_piece(mtp) if s == len(counts) - 1 else piece)
        start += n
    return out


def costs_of(split, pp: int, chunks: int, mtp: bool, x: float):
    """The simulator's per-stage costs (memory per rank-average layers of one microbatch; a2a x MoE F)."""
    from primus_megatron import schedules as S

    pieces = stage_pieces(split, pp, chunks, mtp)
    unit = sum(p.saved for p in pieces) / pp
    a2a = [x * p.moe for p in pieces]
    return S.Costs(f=[p.f + a for p, a in zip(pieces, a2a)], b=[p.b + a for p, a in zip(pieces, a2a)],
                   w=[p.w for p in pieces], mem_f=[p.saved / unit for p in pieces],
                   mem_b=[-(p.saved - p.w_saved) / unit for p in pieces],
                   mem_w=[-p.w_saved / unit for p in pieces], a2a=a2a)


def splits(name: str, pp: int, balanced: bool) -> list:
    """The even split, or every split `schedules.balance` considers for the schedule (head: MTP's cost)."""
    from primus_megatron.schedules.balance import ModelCosts, Part, candidates
    from primus_megatron.schedules.layer_split import LayerSplit

    if not balanced:
        return [LayerSplit(NUM_LAYERS)]
    moe, head = layer_piece(MOE, True), head_piece(True)
    model = ModelCosts(layer=Part(moe.f, moe.b, moe.w), head=Part(head.f, head.b, head.w))
    return candidates(NUM_LAYERS, pp, CHUNKS.get(name, 2), w_ops=name != "interleaved-1f1b" and name != P.COMBINED,
                      model=model, placement=PLACEMENT.get(name, "loop"), exhaustive=False)


def best(name: str, pp: int, m: int, x: float, mtp: bool, balanced: bool):
    """(simulated result, split) of `name`'s fastest split; pairs where the schedule has them."""
    from primus_megatron import schedules as S

    found = []
    for split in splits(name, pp, balanced):
        costs = costs_of(split, pp, CHUNKS.get(name, 2), mtp, x)
        pairs = "no" if name in ("zb-h1", "interleaved-1f1b") else "yes"
        try:
            result = S.simulate(P.planned(name, pairs, pp, m, costs), costs)
        except S.ScheduleError:
            continue
        found.append((result.makespan, result, split))
    makespan, result, split = min(found, key=lambda t: t[0])
    return result, split


def results(pps=(8, 16)) -> list:
    """((pp, m, all-to-all share, split), {schedule: simulated result on its fastest split of that kind})."""
    out = []
    for pp in pps:
        for m in (2 * pp, 4 * pp):
            for x in (0.5, 1.0):
                for balanced in (False, True):
                    out.append(((pp, m, x, "balanced" if balanced else "even"),
                                {name: best(name, pp, m, x, True, balanced)[0] for name in SCHEDULES}))
    return out


def rows(found: list) -> list:
    """Each schedule's makespan as a ratio to megatron's combined 1F1B's on the same kind of split, and its
    largest rank's peak activation memory; then the combined 1F1B's makespan."""
    out = []
    for key, by in found:
        ref = by[P.COMBINED].makespan
        out.append([*key, *(f"{r.makespan / ref:.3f} / {r.max_peak_memory:.2f}" for r in by.values()), f"{ref:.1f}"])
    return out


def cost_rows() -> list:
    """Each piece's F, B, W (MoE F units) and activation elements per token."""
    pieces = {"dense layer": layer_piece(DENSE_LAYER, False), "MoE layer": layer_piece(MOE, True),
              "output layer and loss": head_piece(False), "head with MTP (MTP layer, projection, 2 outputs)":
              head_piece(True)}
    return [[name, f"{p.f:.2f}", f"{p.b:.2f}", f"{p.w:.2f}", f"{p.saved / 1e3:.1f}k"] for name, p in pieces.items()]


def _span(values) -> str:
    values = list(values)
    return f"{min(values):.3f}-{max(values):.3f}"


def reading(found: list) -> str:
    """What the rows show, from their numbers."""
    def vs(name: str, split: str) -> str:
        return _span(by[name].makespan / by[P.COMBINED].makespan for key, by in found if key[3] == split)

    def memory(name: str) -> str:
        return _span(by[name].max_peak_memory / by[P.COMBINED].max_peak_memory for key, by in found)

    even = {key[:3]: by for key, by in found if key[3] == "even"}
    gain = {name: _span(even[key[:3]][name].makespan / by[name].makespan for key, by in found
                        if key[3] == "balanced") for name in ("dualpipev", P.COMBINED)}
    return (
        f"What it shows: with the layers split evenly, DualPipeV runs at {vs('dualpipev', 'even')} of megatron's "
        f"combined 1F1B's time and zbv with pairs at {vs('zbv', 'even')}; zb-h1 and interleaved 1F1B, one op at a "
        f"time, pay the all-to-all in full ({vs('zb-h1', 'even')} and {vs('interleaved-1f1b', 'even')}). The head "
        f"with MTP costs {head_piece(True).f:.1f} MoE layers' F on the last stage (under the V on rank 0, beside "
        f"the dense first layer): a balanced split is {gain['dualpipev']}x faster than the even one for DualPipeV "
        f"and {gain[P.COMBINED]}x for megatron's combined 1F1B, and on their balanced splits DualPipeV runs at "
        f"{vs('dualpipev', 'balanced')} of megatron's and zbv at {vs('zbv', 'balanced')} (zb-h1, which hides no "
        f"all-to-all, at {vs('zb-h1', 'balanced')}). Peak activation memory: "
        f"DualPipeV holds {memory('dualpipev')} and zbv {memory('zbv')} of megatron's combined 1F1B's (whose "
        "extra warm-up forward and two chunks keep more on its first rank); balanced splits raise every "
        "schedule's peak a little (the ranks that take the head's share of layers keep them).")


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    args = parser.parse_args(argv)
    found = results()
    text = C.section(
        C.command_line("benchmarks/dsv3_layers.py", argv),
        "Simulated, not measured (2026-11-29).",
        C.method(__doc__),
        "Per piece, F, B and W in units of a MoE layer's F (all-to-all excluded) and the activation elements it "
        "saves per token:",
        C.table(["piece", "F", "B", "W", "saved / token"], cost_rows()),
        "Each schedule's makespan against megatron's combined 1F1B (`--overlap-moe-expert-parallel-comm`, its "
        "interleaved order with every steady-state F&B combined) on the same kind of split / its largest rank's "
        "peak activation memory (an average rank's layers for one microbatch). Pairs: dualpipev's own, zbv's "
        "F-then-B neighbours paired (`schedules/pairing.py`), megatron's combined steps; zb-h1 and interleaved "
        "1F1B run one op at a time. The last column: megatron's combined 1F1B's makespan in MoE-layer F units.",
        C.table(["pp", "m", "all-to-all / F", "split", "dualpipev", "zbv (pairs)", "zb-h1", "combined 1F1B",
                 "interleaved 1F1B", "combined 1F1B makespan"], rows(found)),
        reading(found))
    C.publish(args, TITLE, text, "dsv3_layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
