"""Cost models for the evolutionary search: MetaSchedule's own (``random``, ``xgb``, ``mlp``) and a
small one of the lab's, ``ridge``, that needs nothing beyond NumPy (XGBoost is not installed on the
GPU machine).

``ridge``: each candidate's MetaSchedule per-store features (164 per buffer store) summed and
maxed over stores, log-scaled, standardised; a ridge regression on the measured candidates'
normalised throughput (best time / time; failures count as 0). Until it has seen a few results it
predicts random scores, like the random model.
"""

from __future__ import annotations

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from .names import COST_MODELS


@derived_object
class RidgeModel(ms.cost_model.PyCostModel):
    def __init__(self, alpha: float = 1.0, min_samples: int = 8, seed: int = 0):
        super().__init__()
        self.alpha, self.min_samples = alpha, min_samples
        self.extractor = ms.feature_extractor.PerStoreFeature(extract_workload=False)
        self.xs: list[np.ndarray] = []
        self.costs: list[float] = []
        self.weights = None
        self.rng = np.random.default_rng(seed)

    def _features(self, context, candidates) -> np.ndarray:
        feats = self.extractor.extract_from(context, candidates)
        rows = []
        for f in feats:
            a = f.numpy() if hasattr(f, "numpy") else np.asarray(f)
            a = a.reshape(-1, a.shape[-1]) if a.size else np.zeros((1, 164))
            rows.append(np.concatenate([a.sum(0), a.max(0)]))
        return np.log1p(np.abs(np.asarray(rows, dtype=np.float64)))

    def load(self, path: str) -> None:
        data = np.load(path, allow_pickle=True)
        self.xs, self.costs = list(data["xs"]), list(data["costs"])
        self._fit()

    def save(self, path: str) -> None:
        np.savez(path, xs=np.asarray(self.xs), costs=np.asarray(self.costs))

    def update(self, context, candidates, results) -> None:
        x = self._features(context, candidates)
        for row, res in zip(x, results):
            secs = [float(s) for s in (res.run_secs or [])]
            ok = res.error_msg is None and secs and min(secs) < 1e9
            self.xs.append(row)
            self.costs.append(float(np.median(secs)) if ok else float("inf"))
        self._fit()

    def _fit(self):
        if len(self.xs) < self.min_samples:
            self.weights = None
            return
        x = np.asarray(self.xs)
        c = np.asarray(self.costs)
        best = np.min(c[np.isfinite(c)]) if np.isfinite(c).any() else 1.0
        y = np.where(np.isfinite(c), best / c, 0.0)
        self.mu, self.sd = x.mean(0), x.std(0) + 1e-9
        z = (x - self.mu) / self.sd
        z = np.hstack([z, np.ones((len(z), 1))])
        reg = self.alpha * np.eye(z.shape[1])
        reg[-1, -1] = 0.0
        self.weights = np.linalg.solve(z.T @ z + reg, z.T @ y)

    def predict(self, context, candidates) -> np.ndarray:
        if self.weights is None:
            return self.rng.uniform(0, 1, len(candidates))
        z = (self._features(context, candidates) - self.mu) / self.sd
        z = np.hstack([z, np.ones((len(z), 1))])
        return z @ self.weights


def make_cost_model(name: str, seed: int = 0):
    if name == "ridge":
        return RidgeModel(seed=seed)
    if name == "random":
        return ms.cost_model.RandomModel(seed=seed)
    if name == "xgb":
        try:
            import xgboost  # noqa: F401
        except ImportError:
            raise ValueError("--cost-model xgb needs the xgboost package (not installed here); "
                             "use ridge or random") from None
        return ms.cost_model.XGBModel(num_warmup_samples=0)
    if name == "mlp":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ValueError("--cost-model mlp needs torch; use ridge or random") from None
        return ms.cost_model.CostModel.create("mlp")
    raise ValueError(f"unknown cost model {name!r} (known: {', '.join(COST_MODELS)})")
