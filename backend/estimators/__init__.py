"""Estimators (frame -> G-buffers) behind one registry; see :mod:`.base`."""
from .base import Estimator, EstimatorOutput, available_estimators, get_estimator, register_estimator

__all__ = ["Estimator", "EstimatorOutput", "available_estimators", "get_estimator", "register_estimator"]
