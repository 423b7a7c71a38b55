"""The experiments: each says which jobs to run through :mod:`reports.engine` and how to tabulate
them (:mod:`reports.views`): the main run, the benchmarks, the sweeps, the calibration fit, and
tuning's timing of tuned configurations in the harness."""
