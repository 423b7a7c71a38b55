"""What the results look like: Markdown tables, charts, the report page, ``schedlab diff`` and the
tuning report's rendering. Views import :mod:`reports.engine` only."""
