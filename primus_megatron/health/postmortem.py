"""`primus-pipeline postmortem`: the root of a stopped job from its ranks' reports (pure Python).

Each report that says its rank waited on a peer is an edge of the wait-for graph (rank r waits for
peer p on message m). Every chain of waits is followed to its end: a rank that waited on no one
(stalled inside an op, asked for a report), that crashed, or that left no report (it died). The
root is where the chains end. A cycle can only come from the aftermath (a stalled rank that, once
its peer had given up, went on to wait for it): the wait in it that began last is dropped, so the
answer does not depend on the order in which ranks timed out or wrote their reports.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .reports import Folder, crash_head


@dataclass
class Finding:
    root: Optional[int]  # global rank every chain (most chains) ends at
    ends: dict  # terminal rank -> the ranks whose chain ends there
    edges: dict  # rank -> peer it waited on (after cycles are broken)
    dropped: list  # (rank, peer) waits dropped as aftermath
    chains: list  # each a list of global ranks, the waiter first
    missing: list  # ranks named (as a peer, or within a pipeline of known size) that left no report
    state: dict = field(default_factory=dict)  # root's state: died, crashed, in op, waiting


def analyse(folder: Folder, world: Optional[int] = None) -> Finding:
    """The wait-for graph of `folder`'s reports and its root (module doc). `world`: how many ranks
    the job had (default: those the reports name, and their pipelines' sizes)."""
    reports = folder.reports
    waits = {r: rep["waiting"] for r, rep in reports.items() if rep.get("waiting")}
    edges = {r: int(w["peer_global"]) for r, w in waits.items() if r not in folder.crashes}
    dropped = _break_cycles(edges, {r: float(w.get("since") or 0.0) for r, w in waits.items()})
    chains = [_chain(r, edges) for r in sorted(edges)]
    ends: dict = {}
    for chain in chains:
        ends.setdefault(chain[-1], []).append(chain[0])
    named = set(reports) | set(folder.crashes) | set(edges.values())
    size = world if world is not None else max([int(rep.get("pipeline_size") or 0) for rep in reports.values()]
                                               + [max(named) + 1 if named else 0])
    missing = sorted((set(range(size)) | named) - set(reports) - set(folder.crashes))
    root = _root(ends, folder, missing)
    return Finding(root, ends, edges, dropped, chains, missing, _state(root, folder, missing))


def _break_cycles(edges: dict, since: dict) -> list:
    """Drop, from each cycle, the wait that began last (module doc); the dropped (rank, peer)."""
    dropped = []
    while True:
        cycle = _find_cycle(edges)
        if not cycle:
            return dropped
        latest = max(cycle, key=lambda r: (since.get(r, 0.0), r))
        dropped.append((latest, edges.pop(latest)))


def _find_cycle(edges: dict) -> list:
    for start in sorted(edges):
        seen, node = [], start
        while node in edges and node not in seen:
            seen.append(node)
            node = edges[node]
        if node in seen:
            return seen[seen.index(node):]
    return []


def _chain(start: int, edges: dict) -> list:
    chain = [start]
    while chain[-1] in edges:
        chain.append(edges[chain[-1]])
    return chain


def _root(ends: dict, folder: Folder, missing: list) -> Optional[int]:
    """The end most chains reach; without any wait, the rank that crashed or died."""
    if ends:
        return max(sorted(ends), key=lambda r: len(ends[r]))
    fallen = sorted(folder.crashes) or missing
    return fallen[0] if fallen else None


def _state(root: Optional[int], folder: Folder, missing: list) -> dict:
    """What the root was doing: {"status": died | crashed | in-op | waiting | idle, ...}."""
    if root is None:
        return {}
    if root in folder.crashes:
        return {"status": "crashed", "stack": crash_head(folder.crashes[root])}
    rep = folder.reports.get(root)
    if rep is None:
        return {"status": "died"}
    out = {"status": "idle", "kind": rep.get("kind"), "stack": rep.get("stack", [])[:3], "host": rep.get("host"),
           "pipeline_rank": rep.get("pipeline_rank"), "pipeline_size": rep.get("pipeline_size"),
           "time": rep.get("time")}
    if rep.get("op"):
        out.update(status="in-op", op=rep["op"])
    if rep.get("waiting"):
        out.update(status="waiting" if not rep.get("op") else "in-op", waiting=rep["waiting"])
    return out
