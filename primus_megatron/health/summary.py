"""A postmortem's words: one paragraph a person reads in a minute, and the same as JSON."""
from __future__ import annotations

import os
from typing import Any

from .postmortem import Finding
from .reports import Folder

CHAINS_SHOWN = 4
WAITERS_SHOWN = 3
KINDS = {"timeout": "after its p2p timeout", "hang": "from its p2p watchdog", "request": "when asked (SIGUSR1)",
         "terminated": "as it was stopped (SIGTERM)"}


def paragraph(f: Finding, folder: Folder) -> str:
    if f.root is None:
        return "No rank waited on another and none crashed or went missing: the reports name no root."
    parts = [_root_sentence(f, folder), _doing(f, folder)]
    parts.append(_chains(f))
    others = {end: who for end, who in f.ends.items() if end != f.root}
    if others:
        parts.append("Other chains end at " + ", ".join(f"rank {e} ({len(w)} waiting)" for e, w in sorted(others.items()))
                     + ".")
    if f.dropped:
        parts.append("Dropped as aftermath (these waits began after their peer had stopped): "
                     + ", ".join(f"{r}→{p}" for r, p in f.dropped) + ".")
    total = len(folder.reports) + len(folder.crashes) + len(f.missing)
    parts.append(f"Reports from {len(folder.reports) + len(folder.crashes)} of {total} ranks"
                 + (f"; none from rank{'s' if len(f.missing) > 1 else ''} {_ranks(f.missing)}." if f.missing else "."))
    return " ".join(p for p in parts if p)


def _root_sentence(f: Finding, folder: Folder) -> str:
    s, r = f.state, f.root
    rep = folder.reports.get(r, {})
    who = f"Rank {r}"
    if rep.get("pipeline_rank") is not None:
        who += f" (pipeline rank {rep['pipeline_rank']} of {rep.get('pipeline_size')}, host {rep.get('host')})"
    n = sum(len(w) for w in f.ends.values())
    chains = f"the wait chains of {len(f.ends.get(r, []))} of {n} waiting rank(s) end at it" if n else "no rank waited"
    status = {"died": "it left no report: it died (SIGKILL, the out-of-memory killer, a lost host) and",
              "crashed": "it crashed on a fatal signal and"}.get(s.get("status"), "")
    return f"{who} is the root: {status} {chains}.".replace(":  ", ": ")


def _doing(f: Finding, folder: Folder) -> str:
    s = f.state
    if s.get("status") == "crashed":
        return "faulthandler's stack head: " + "; ".join(s.get("stack", [])) + "." if s.get("stack") else ""
    if s.get("status") == "died":
        waiters = [(r, folder.reports[r]["waiting"]) for r, p in sorted(f.edges.items()) if p == f.root]
        return ("It never delivered what its neighbours waited for: " + "; ".join(
            f"rank {r} the {'send' if w.get('send') else 'receive'} of {w.get('what')} in op {w.get('op')}"
            for r, w in waiters[:WAITERS_SHOWN]) + ".") if waiters else ""
    out = []
    if s.get("op"):
        op = s["op"]
        out.append(f"It was inside op {op.get('label')} for {s['time'] - op['since']:.3g} s")
    w = s.get("waiting")
    if w:
        out.append(f"{'it' if out else 'It'} waited for the {'send' if w.get('send') else 'receive'} of "
                   f"{w.get('what')} {'to' if w.get('send') else 'from'} rank {w.get('peer_global')}")
    elif out:
        out.append("waiting on no peer")
    how = KINDS.get(s.get("kind"), f"({s.get('kind')})")
    stack = s.get("stack") or []
    head = f"; its Python stack's head: {_frame(stack[0])}" if stack else ""
    return (", ".join(out) + f", when it wrote its report {how}{head}.") if out else \
        f"It was between ops when it wrote its report {how}{head}."


def _chains(f: Finding) -> str:
    chains = sorted(f.chains, key=lambda c: (-len(c), c))
    maximal = [c for c in chains if not any(c != d and d[-len(c):] == c for d in chains)]
    shown = "; ".join("→".join(map(str, c)) for c in maximal[:CHAINS_SHOWN])
    more = f" (and {len(maximal) - CHAINS_SHOWN} more)" if len(maximal) > CHAINS_SHOWN else ""
    return f"Wait chains (waiter→peer): {shown}{more}." if shown else ""


def _frame(text: str) -> str:
    path, _, rest = text.partition(":")
    return os.path.basename(path) + ":" + rest if rest else text


def _ranks(ranks: list) -> str:
    return ", ".join(map(str, ranks))


def as_json(f: Finding, folder: Folder) -> dict[str, Any]:
    return {"root": f.root, "root_state": f.state, "paragraph": paragraph(f, folder),
            "chains": f.chains, "ends": {str(k): v for k, v in sorted(f.ends.items())},
            "dropped_waits": [list(d) for d in f.dropped], "missing_reports": f.missing,
            "reports": sorted(folder.reports), "crashed": sorted(folder.crashes), "unreadable": folder.unreadable}
