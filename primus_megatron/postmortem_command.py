"""`primus-pipeline postmortem DIR`: which rank stopped a job, from its ranks' reports (docs/health.md).

    primus-pipeline postmortem /shared/hang-reports [--format json] [--picture last-step.png] [--world N]
"""
from __future__ import annotations

import argparse
import json
import sys

from .health import postmortem, reports, summary
from .schedules.errors import ScheduleError


class UsageError(ScheduleError):
    """Bad input: one sentence, exit status 2 (a ScheduleError, which `cli.main` reports so, also when
    cli runs as __main__ and this module's import of it is a second copy)."""


def add_parser(sub) -> None:
    from .cli import _int_at_least

    p = sub.add_parser("postmortem", help="name the rank that stopped a job, from its ranks' reports",
                       description="Read every rank's report in DIR (written on a p2p timeout, a fatal or "
                                   "SIGTERM signal, or kill -USR1, when PRIMUS_HANG_REPORT_DIR is set), rebuild "
                                   "the wait-for graph across ranks and name the root: the rank every wait chain "
                                   "ends at and what it was doing, or the rank that died.")
    p.add_argument("folder", metavar="DIR", help="the job's $PRIMUS_HANG_REPORT_DIR")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    p.add_argument("--picture", metavar="FILE", default=None,
                   help="also draw the last step up to the stop, every rank a row (.png or .svg)")
    p.add_argument("--world", type=_int_at_least(1), default=None, metavar="N",
                   help="how many ranks the job had (default: those the reports name), so that silent ones count")


def run(args: argparse.Namespace) -> int:
    from .cli import _check_output

    if args.picture:
        try:
            _check_output("--picture", args.picture, (".png", ".svg"))
        except Exception as exc:  # cli's UsageError (maybe of a second copy of cli): the same sentence
            raise UsageError(str(exc)) from None
    try:
        folder = reports.read_folder(args.folder)
    except reports.NoReports as exc:
        raise UsageError(str(exc)) from None
    finding = postmortem.analyse(folder, world=args.world)
    if args.picture:
        from .health.picture import write_picture

        write_picture(args.picture, finding, folder, args.world)
    if args.format == "json":
        print(json.dumps(summary.as_json(finding, folder), indent=1))
    else:
        print(summary.paragraph(finding, folder))
    sys.stdout.flush()
    return 0
