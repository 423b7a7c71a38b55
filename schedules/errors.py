"""Errors the schedule layer raises for bad input, before anything is built."""


class ScheduleParamError(ValueError):
    """A parameter is out of range. The message is one line and names the parameter."""
