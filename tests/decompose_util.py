"""Test-only helpers for the decompose tests: a tiny random-weight numpy estimator.

The product never registers this; tests call :func:`register_tiny` (in-process) or run
the CLI with ``cli_util.run_cli(..., tiny=True)``, which registers it in the child
process first.
"""
from __future__ import annotations

import numpy as np

from backend.estimators.base import Estimator, EstimatorOutput, register_estimator


class TinyEstimator(Estimator):
    """A random 2-layer per-pixel network (numpy). Deterministic for a seed.

    Pixels brighter than ``sky_threshold`` (mean linear RGB) get confidence 0 (sky).
    """

    name = "tiny"

    def __init__(self, seed: int = 0, with_normals: bool = False, depth_kind: str = "relative",
                 sky_threshold: float = 0.95, fail_on_call: int = -1, delay_s: float = 0.0,
                 device=None):
        rng = np.random.default_rng(seed)
        self.w1 = rng.normal(0, 1, (3, 8)).astype(np.float32)
        self.b1 = rng.normal(0, 0.1, 8).astype(np.float32)
        self.w2 = rng.normal(0, 1, (8, 9)).astype(np.float32)
        self.seed = seed
        self.with_normals = with_normals
        self.depth_kind = depth_kind
        self.sky_threshold = sky_threshold
        self.fail_on_call = fail_on_call
        self.delay_s = delay_s
        self.calls = 0
        self.shapes = []

    def settings(self):
        return {"name": self.name, "seed": self.seed, "normals": self.with_normals,
                "depth_kind": self.depth_kind}

    def predict(self, rgb):
        self.calls += 1
        self.shapes.append(rgb.shape)
        if self.delay_s:
            import time

            time.sleep(self.delay_s)
        if self.calls == self.fail_on_call:
            raise RuntimeError("tiny estimator: simulated failure")
        f = np.tanh(rgb @ self.w1 + self.b1)
        o = f @ self.w2
        sig = lambda x: 1.0 / (1.0 + np.exp(-x))
        depth = (1.0 + np.log1p(np.exp(o[..., 0]))).astype(np.float32)
        if self.depth_kind == "metric":
            depth = depth * 3.0
        albedo = sig(o[..., 1:4]).astype(np.float32)
        normal = None
        if self.with_normals:
            n = np.concatenate([np.tanh(o[..., 4:6]) * 0.5, np.ones_like(o[..., :1])], axis=-1)
            normal = (n / np.linalg.norm(n, axis=-1, keepdims=True)).astype(np.float32)
        conf = sig(o[..., 6]).astype(np.float32) * 0.9 + 0.1
        conf[rgb.mean(axis=-1) > self.sky_threshold] = 0.0
        return EstimatorOutput(
            depth=depth, depth_kind=self.depth_kind, normal=normal, albedo=albedo,
            metallic=sig(o[..., 7]).astype(np.float32), roughness=sig(o[..., 8]).astype(np.float32),
            confidence=conf, models={"tiny-random": f"seed{self.seed}"},
        )


def register_tiny() -> None:
    register_estimator("tiny", lambda **kw: TinyEstimator(**kw))
    register_estimator("tiny_slow", lambda **kw: TinyEstimator(delay_s=0.4, **kw))
    register_estimator("tiny_fail2", lambda **kw: TinyEstimator(fail_on_call=2, **kw))
