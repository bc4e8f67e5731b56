"""The zero-bubble paper's evaluation settings (Qi et al., ICLR 2024; arXiv v2 for ZB-V): the
profiled costs behind its bubble tables and the memory model of its models, as the planner's
`Costs`. Pure data, for benchmarks/paper_tables.py and the tests that hold our numbers against
the paper's.

Memory per transformer layer and microbatch (s = sequence, b = microbatch, h = hidden,
a = heads): an F adds M_B = sb(34h + 5as), B frees all but the weight gradient's M_W = 32sbh,
W frees that (the paper's section 3 and its efficiency script). In the planner's units (an F
adds 1): mem_b = -(1 - M_W/M_B), mem_w = -M_W/M_B.
"""
from __future__ import annotations

from typing import NamedTuple

from .costs import Costs

SEQUENCE = 1024


class Model(NamedTuple):
    name: str
    layers: int
    heads: int
    hidden: int


MODELS = {m.name: m for m in (Model("1.5B", 22, 24, 2304), Model("6.2B", 30, 32, 4096),
                              Model("14.6B", 46, 40, 5120), Model("28.3B", 62, 48, 6144))}


def wgrad_share(model: Model, seq: int = SEQUENCE) -> float:
    """M_W / M_B of one transformer layer: 32h / (34h + 5as)."""
    return 32 * model.hidden / (34 * model.hidden + 5 * model.heads * seq)


class Setting(NamedTuple):
    model: str
    pp: int
    microbatches: int
    f: float  # ms; for the V settings per chunk (a rank's share is twice)
    b: float
    w: float
    comm: float

    def costs(self, share: float = 1.0) -> Costs:
        """The setting's costs with the paper's memory model; `share`: F, B and W times scaled
        (2.0 turns per-chunk costs into a rank's share)."""
        kept = wgrad_share(MODELS[self.model])
        return Costs(f=share * self.f, b=share * self.b, w=share * self.w, comm=self.comm,
                     mem_b=-(1.0 - kept), mem_w=-kept)


# Appendix table "profiled time of T_F, T_B, T_W and T_comm" (ms, A100), behind Table 5.
TABLE5_SETTINGS = tuple(Setting(*row) for row in (
    ("1.5B", 8, 24, 18.522, 18.086, 9.337, 0.601), ("1.5B", 8, 32, 18.513, 18.086, 9.331, 0.626),
    ("1.5B", 8, 64, 18.546, 18.097, 9.321, 0.762),
    ("6.2B", 8, 24, 29.718, 29.444, 19.927, 0.527), ("6.2B", 8, 32, 29.802, 29.428, 19.530, 0.577),
    ("6.2B", 8, 64, 29.935, 29.621, 19.388, 0.535),
    ("14.6B", 16, 48, 11.347, 11.248, 8.132, 0.377), ("14.6B", 16, 64, 11.307, 11.254, 8.101, 0.379),
    ("14.6B", 16, 128, 11.325, 11.308, 8.109, 0.378),
    ("28.3B", 32, 96, 10.419, 10.207, 7.715, 0.408), ("28.3B", 32, 128, 10.408, 10.204, 7.703, 0.408),
    ("28.3B", 32, 256, 10.402, 10.248, 7.698, 0.460),
))

TABLE5_COLUMNS = ("1F1B", "1F1B-I", "ZB-H1", "ZB-H2", "ZB-1p", "ZB-2p")

# Table 5's bubble rates, (model, p, m) -> column -> value. The rows of /work/shared/REFERENCE.md
# (`SOURCE` "REFERENCE.md"); the other six settings' rows as the authors' efficiency script
# (sail-sg/zero-bubble-pipeline-parallelism, branch arxiv, megatron/core/pipeline_parallel/
# efficiency.py, its closing listing of Table 5) prints them.
TABLE5 = {
    ("1.5B", 8, 24): (0.2431, 0.1055, 0.1585, 0.1083, 0.1585, 0.0433),
    ("1.5B", 8, 32): (0.1985, 0.0818, 0.1242, 0.0837, 0.1242, 0.0039),
    ("1.5B", 8, 64): (0.1240, 0.0443, 0.0674, 0.0444, 0.0674, 0.0026),
    ("6.2B", 8, 24): (0.2347, 0.0808, 0.1323, 0.0698, 0.1323, 0.0029),
    ("6.2B", 8, 32): (0.1898, None, 0.1045, 0.0559, 0.1045, 0.0022),
    ("6.2B", 8, 64): (0.1091, None, 0.0554, 0.0294, 0.0554, 0.0010),
    ("14.6B", 16, 48): (0.2552, 0.1104, 0.1397, 0.0672, 0.1397, 0.0066),
    ("14.6B", 16, 64): (0.2082, None, 0.1088, 0.0516, 0.1088, 0.0054),
    ("14.6B", 16, 128): (0.1251, None, 0.0576, 0.0266, 0.0576, 0.0028),
    ("28.3B", 32, 96): (0.2646, 0.1493, 0.1421, 0.0641, 0.1421, 0.0038),
    ("28.3B", 32, 128): (0.2168, None, 0.1106, 0.0490, 0.1106, 0.0029),
    ("28.3B", 32, 256): (0.1352, None, 0.0594, 0.0257, 0.0594, 0.0018),
}
REFERENCE_ROWS = {("1.5B", 8, 24), ("1.5B", 8, 32), ("1.5B", 8, 64), ("6.2B", 8, 24), ("14.6B", 16, 48),
                  ("28.3B", 32, 96)}


def source(key: tuple) -> str:
    return "REFERENCE.md" if key in REFERENCE_ROWS else "authors' efficiency.py"


# ZB-V (Table 8): per-chunk costs (ms) from the authors' efficiency script, and the table's
# bubble rates 1F1B / 1F1B-I / ZB-H1 / ZB-H2 / ZB-V (REFERENCE.md).
TABLE8_SETTINGS = tuple(Setting(*row) for row in (
    ("6.2B", 16, 48, 14.407, 14.380, 9.676, 1.610), ("6.2B", 16, 64, 14.412, 14.393, 9.688, 1.621),
    ("6.2B", 16, 128, 14.316, 14.306, 9.639, 1.619),
    ("14.6B", 24, 72, 6.763, 6.969, 5.251, 0.755), ("14.6B", 24, 96, 6.783, 6.984, 5.259, 0.758),
    ("14.6B", 24, 192, 6.785, 6.990, 5.260, 0.770),
    ("28.3B", 32, 96, 9.458, 9.748, 7.288, 0.879), ("28.3B", 32, 128, 9.469, 9.744, 7.306, 0.892),
    ("28.3B", 32, 256, 9.447, 9.644, 7.193, 0.887),
))
TABLE8_COLUMNS = ("1F1B", "1F1B-I", "ZB-H1", "ZB-H2", "ZB-V")
TABLE8 = {
    ("6.2B", 16, 48): (0.2668, 0.1499, 0.1536, 0.0823, 0.0697),
    ("6.2B", 16, 64): (0.2206, 0.1169, 0.1198, 0.0630, 0.0533),
    ("6.2B", 16, 128): (0.1390, 0.0621, 0.0637, 0.0325, 0.0274),
    ("14.6B", 24, 72): (0.2699, 0.1519, 0.1439, 0.0628, 0.0638),
    ("14.6B", 24, 96): (0.2229, 0.1184, 0.1121, 0.0480, 0.0483),
    ("14.6B", 24, 192): (0.1403, 0.0630, 0.0595, 0.0247, 0.0250),
    ("28.3B", 32, 96): (0.2676, 0.1509, 0.1429, 0.0629, 0.0593),
    ("28.3B", 32, 128): (0.2204, 0.1177, 0.1111, 0.0478, 0.0451),
    ("28.3B", 32, 256): (0.1362, 0.0626, 0.0593, 0.0251, 0.0236),
}
