"""The names the tuner's options take: its search spaces, strategies and cost models. Plain
strings, importing nothing, so that the command line offers them as choices (and refuses a wrong
one) without loading TVM; :mod:`tuning.spaces`, :mod:`tuning.tuner` and :mod:`tuning.cost_models`
define what each name is."""

SPACE_NAMES = ("classic", "tiled", "fast", "dispatch", "default")
STRATEGIES = ("exhaustive", "random", "evolutionary", "ordered")
COST_MODELS = ("ridge", "random", "xgb", "mlp")
