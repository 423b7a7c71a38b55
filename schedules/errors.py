"""Errors the schedule layer raises for bad input, before anything is built."""


class ScheduleParamError(ValueError):
    """A parameter is out of range. The message is one line and names the parameter."""


class PluginError(ScheduleParamError):
    """A plugin could not be loaded, or a step it registered failed: one line naming the plugin and
    the cause (``plugin my_steps.py: ModuleNotFoundError: No module named 'foo'``)."""
