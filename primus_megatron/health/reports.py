"""Reading a folder of rank reports (what health/flight.py writes): pure Python.

postmortem-rank<G>.json: a rank's JSON report; crash-rank<G>.txt, when not empty: the stacks
faulthandler wrote as the rank died of a fatal signal. Rank numbers are global."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Optional

REPORT = re.compile(r"postmortem-rank(\d+)\.json$")
CRASH = re.compile(r"crash-rank(\d+)\.txt$")


class NoReports(ValueError):
    """The folder does not exist or holds no report: one sentence for the CLI."""


@dataclass
class Folder:
    reports: dict = field(default_factory=dict)  # global rank -> report dict
    crashes: dict = field(default_factory=dict)  # global rank -> faulthandler's text
    unreadable: list = field(default_factory=list)  # file names that are not a report


def read_folder(folder: str) -> Folder:
    """Every report and crash file in `folder`; NoReports when there is none."""
    if not os.path.isdir(folder):
        raise NoReports(f"postmortem needs a folder of rank reports ($PRIMUS_HANG_REPORT_DIR); {folder!r} "
                        f"is not a folder")
    out = Folder()
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        report, crash = REPORT.match(name), CRASH.match(name)
        if report:
            loaded = _load(path)
            if loaded is None:
                out.unreadable.append(name)
            else:
                out.reports[int(report.group(1))] = loaded
        elif crash:
            text = _text(path)
            if text.strip():
                out.crashes[int(crash.group(1))] = text
    if not out.reports and not out.crashes:
        raise NoReports(f"{folder!r} holds no rank report (postmortem-rank<R>.json or crash-rank<R>.txt); set "
                        f"PRIMUS_HANG_REPORT_DIR for the job's ranks so that they write one when they stop")
    return out


def _load(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("rank"), int) else None


def _text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def crash_head(text: str, frames: int = 3) -> list:
    """The innermost frames of the crashing thread in faulthandler's text ('File "x", line n in f')."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("File ")]
    return lines[:frames]
