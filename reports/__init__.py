"""Build, verify, time, IR dumps, tables and charts. Reads the registry in ``schedules``."""
