"""The one exception the planner raises for bad input or a rejected schedule."""


class ScheduleError(ValueError):
    """A schedule cannot be built or would not run correctly, or an input the planner reads
    (an option, a profile file, a plot file name) is not one it accepts.

    The message is one sentence meant for the user: it names the option or the
    rank/op at fault and what is allowed or what is waited for. `layer_split`'s
    `SplitError` is one. Code that calls the planner wrongly gets Python's own
    errors instead: an object `plot` cannot draw (TypeError), a schedule name
    registered twice or an unknown placement in `@register` (ValueError, when the
    schedules are imported).
    """
