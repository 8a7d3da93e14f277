"""Importing this module registers the built-in estimators (lazy: heavy imports happen on use)."""
from .base import register_estimator


def _embedded(**kw):
    from .embedded import EmbeddedEstimator

    return EmbeddedEstimator(**kw)


def _marigold(**kw):
    from .marigold import MarigoldEstimator

    return MarigoldEstimator(**kw)


register_estimator("embedded", _embedded)
register_estimator("marigold", _marigold)
