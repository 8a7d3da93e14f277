"""Albedo colour of the embedded estimator: chromaticity partly from the frame."""
import numpy as np
import pytest

from backend.estimators.embedded import SOURCE_CHROMA, EmbeddedEstimator, source_chroma_albedo

L = np.array([0.2126, 0.7152, 0.0722], np.float32)


def test_source_chroma_keeps_luminance_and_takes_the_frame_colour():
    rng = np.random.default_rng(0)
    grey = np.full((8, 8, 3), 0.1, np.float32)  # dark enough that no channel clips
    frame = np.zeros((8, 8, 3), np.float32)
    frame[..., 0] = rng.uniform(0.2, 0.8, (8, 8))  # red frame of varying brightness
    frame[..., 1] = 0.05
    frame[..., 2] = 0.02
    out = source_chroma_albedo(grey, frame, 1.0)
    np.testing.assert_allclose(out @ L, np.minimum(grey @ L, 1.0), rtol=1e-4, atol=1e-3)  # luminance kept
    ratio_out = out[..., 0] / out[..., 2]
    np.testing.assert_allclose(ratio_out, frame[..., 0] / frame[..., 2], rtol=0.05)
    half = source_chroma_albedo(grey, frame, 0.5)
    np.testing.assert_allclose(half, 0.5 * grey + 0.5 * out, atol=1e-5)
    assert source_chroma_albedo(grey, frame, 0.0) is grey
    assert out.dtype == np.float32 and out.min() >= 0 and out.max() <= 1


def test_black_frame_gives_finite_albedo():
    out = source_chroma_albedo(np.full((4, 4, 3), 0.5, np.float32), np.zeros((4, 4, 3), np.float32))
    assert np.isfinite(out).all() and out.min() >= 0 and out.max() <= 1


def test_estimator_albedo_follows_a_coloured_frame():
    """A saturated blue-green frame: the network albedo path keeps more of that colour
    with the default source chroma than with the network's own chroma (0)."""
    h, w = 96, 128
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    frame = np.stack([0.02 + 0.01 * xx / w, 0.25 + 0.1 * yy / h, 0.45 + 0.1 * xx / w], -1).astype(np.float32)
    own = EmbeddedEstimator(source_chroma=0.0, albedo="network").predict(frame).albedo
    mixed = EmbeddedEstimator(albedo="network").predict(frame).albedo
    assert SOURCE_CHROMA > 0
    sat = lambda a: float(((a.max(-1) - a.min(-1)) / np.maximum(a.max(-1), 1e-4)).mean())
    assert sat(mixed) > sat(own) + 0.2
    assert float((mixed[..., 2] - mixed[..., 0]).mean()) > 0.05  # blue over red, as in the frame
    with pytest.raises(ValueError, match="source_chroma"):
        EmbeddedEstimator(source_chroma=1.5)
