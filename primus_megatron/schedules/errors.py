"""The one exception the planner raises for bad input or a rejected schedule."""


class ScheduleError(ValueError):
    """A schedule cannot be built or would not run correctly.

    The message is one sentence meant for the user: it names the option or the
    rank/op at fault and what is allowed or what is waited for.
    """
