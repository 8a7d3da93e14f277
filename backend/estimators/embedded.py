"""The embedded estimator: our own small network (GBufNet), run by onnxruntime on CPU.

No torch, no network access: the model file ships in the extension
(``backend/model/weights/embedded.onnx``; see ``docs/model-card.md`` for its data,
training, metrics and limits).

Method: the scene-linear frame is downscaled (area filter) so its long side is at
most ``max_size`` pixels (default :data:`DEFAULT_MAX_SIZE` = 192, the scale the network
was trained at: full frames of 160-190 px; smaller frames are processed as they are),
encoded as the network expects (:func:`backend.model.encoding.encode_input`:
auto-exposure, sRGB OETF, normalisation), run once, and every output is resized back
to the full frame with bilinear interpolation (:func:`backend.imaging.resize`).
Predicted disparity (relative inverse depth) becomes relative depth with
:func:`backend.model.encoding.disparity_to_depth`; the sky head becomes Confidence
(0 = sky/background, whose depth is set to the far value).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Dict, Optional

import numpy as np

from ..imaging import resize
from ..intrinsic import decompose_frame
from ..model.encoding import disparity_to_depth, encode_input
from .base import Estimator, EstimatorOutput

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / "model" / "weights" / "embedded.onnx"
MODEL_ID = "gbuffer_editor/embedded"
#: processing long side (pixels); matches the training scale (see docs/model-card.md)
DEFAULT_MAX_SIZE = 192
#: share of the albedo's chromaticity taken from the frame (see :func:`source_chroma_albedo`)
SOURCE_CHROMA = 0.75
_LUMA = np.array([0.2126, 0.7152, 0.0722], dtype=np.float32)


def source_chroma_albedo(albedo: np.ndarray, rgb: np.ndarray, amount: float = SOURCE_CHROMA) -> np.ndarray:
    """Albedo with its chromaticity partly taken from the frame.

    The small network's albedo colour is weak (it drifts toward a desaturated warm grey
    on footage), while its brightness layout is useful. Under the Retinex assumption
    that illumination is close to white, the frame's chromaticity ``I / Y(I)`` is the
    reflectance's; the result is ``(1 - m) A + m Y(A) I / Y(I)`` (Rec.709 luminance
    ``Y``), clipped to [0, 1]. ``m = 0.75`` was chosen on 100 training frames (albedo
    PSNR 14.56 -> 14.74 dB); on 100 held-out synthetic frames it gives 14.59 -> 14.71 dB
    and scale-invariant MSE 0.0269 -> 0.0259. Coloured light tints the albedo in
    proportion to ``m``.

    Args:
        albedo: ``h x w x 3`` float32 linear albedo in [0, 1] (network output).
        rgb: ``h x w x 3`` float32 scene-linear frame at the same size (>= 0).
        amount: ``m`` in [0, 1]; 0 returns ``albedo`` unchanged.

    Returns:
        ``h x w x 3`` float32 in [0, 1].
    """
    m = float(amount)
    if m <= 0:
        return albedo
    chroma = rgb / np.maximum(rgb @ _LUMA, np.float32(1e-4))[..., None]
    from_src = (albedo @ _LUMA)[..., None] * chroma
    out = albedo * np.float32(1.0 - m) + from_src * np.float32(m)
    return np.clip(out, 0.0, 1.0).astype(np.float32, copy=False)
#: albedo methods: ``intrinsic`` (default; :func:`backend.intrinsic.decompose_frame` on the
#: full-size frame) or ``network`` (the network's albedo with :func:`source_chroma_albedo`)
ALBEDO_METHODS = ("intrinsic", "network")
INTRINSIC_ID = "colour-retinex (Grosse et al. 2009) + guided-filter shading"
OUTPUT_NAMES = ("disparity", "normal", "albedo", "metallic", "roughness", "sky")

#: a metallic output whose maximum is below this is a default (no metal anywhere)
DEFAULT_METALLIC_MAX = 0.02
#: a roughness output whose spatial standard deviation is below this is a default
DEFAULT_ROUGHNESS_STD = 0.05


def material_provenance(metallic: np.ndarray, roughness: np.ndarray) -> tuple:
    """Provenance of the network's passes for one frame (``(provenance, pass_models)``
    dicts, see :class:`~backend.estimators.base.EstimatorOutput`).

    Depth, normals, albedo and sky confidence are ``estimated``. Metallic and roughness
    are ``default`` when the frame's output carries no information: metallic below
    :data:`DEFAULT_METALLIC_MAX` everywhere, roughness with a spatial standard deviation
    below :data:`DEFAULT_ROUGHNESS_STD`. Measured on boat, bikes and dolphins (frame 1,
    the shipped weights): metallic at most 3e-5, roughness 0.56 +- 0.02 -- so on real
    footage both read as defaults; ``pass_models`` then says the constant's value.
    """
    prov = {k: "estimated" for k in ("depth", "normal", "albedo", "confidence")}
    models = {k: MODEL_ID for k in prov}
    m_max = float(np.max(metallic)) if metallic.size else 0.0
    if m_max < DEFAULT_METALLIC_MAX:
        prov["metallic"] = "default"
        models["metallic"] = f"{MODEL_ID} (constant: max {m_max:.2g} < {DEFAULT_METALLIC_MAX})"
    else:
        prov["metallic"], models["metallic"] = "estimated", MODEL_ID
    r_std = float(np.std(roughness)) if roughness.size else 0.0
    if r_std < DEFAULT_ROUGHNESS_STD:
        prov["roughness"] = "default"
        models["roughness"] = (f"{MODEL_ID} (near-constant: {float(np.mean(roughness)):.2f} "
                               f"+- {r_std:.2f})")
    else:
        prov["roughness"], models["roughness"] = "estimated", MODEL_ID
    return prov, models


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


#: outer rim (fraction of the long side at the processing size) where the network's
#: normals are replaced by the nearest inner ones (see :func:`replicate_rim`)
NORMAL_RIM = 0.02


def replicate_rim(a: np.ndarray, frac: float) -> np.ndarray:
    """``a`` (``h x w [x C]``) with its outer ``round(frac * max(h, w))`` rows/columns on
    every side replaced by the first row/column inside them (edge replication).

    The network pads every convolution with zeros, and its normals bend toward the frame
    edge over the outer ~4 px at 192 px (on boat.mp4 ``n_x`` rose from 0.29 to 0.41 over
    the left 16 px at full size), so a side key light drew a lighter frame border (issue
    28). Mirror-padding the input removed the rim but cost depth accuracy (NYU AbsRel
    0.183 -> 0.21: the net uses frame-position priors), so only the normals' rim is
    replaced; depth and albedo are not touched.
    """
    h, w = a.shape[:2]
    r = int(round(frac * max(h, w)))
    if r < 1 or h <= 2 * r + 1 or w <= 2 * r + 1:
        return a
    a = np.array(a, copy=True)
    a[:r] = a[r]
    a[-r:] = a[-r - 1]
    a[:, :r] = a[:, r:r + 1]
    a[:, -r:] = a[:, -r - 1:-r]
    return a


class EmbeddedEstimator(Estimator):
    """GBufNet via onnxruntime: relative depth, normals, albedo, metallic, roughness, sky.

    Args:
        model_path: ONNX file; default ``backend/model/weights/embedded.onnx``.
        max_size: long side (pixels) at which the network runs; outputs are resized
            back to the input size; :data:`DEFAULT_MAX_SIZE` (192) by default.
        threads: onnxruntime intra-op threads (default 2).
        device: accepted for CLI compatibility; only ``cpu`` (or ``None``/``auto``).
        source_chroma: share of the albedo's chromaticity taken from the frame
            (:func:`source_chroma_albedo`; 0 = the network's own), in [0, 1]; only
            with ``albedo="network"``.
        albedo: ``"intrinsic"`` (default: single-frame colour Retinex on the full-size
            frame, :func:`backend.intrinsic.decompose_frame`; +1.9 dB scale-invariant
            PSNR over the network's albedo on held-out Cycles scenes, see
            docs/model-card.md) or ``"network"``.

    Raises:
        FileNotFoundError: the model file does not exist.
        ValueError: bad ``max_size``/``threads``/``device``/``albedo``.
    """

    name = "embedded"
    #: the network computes at this long side at most (``max_size`` changes it per instance)
    default_resolution = DEFAULT_MAX_SIZE
    max_resolution = DEFAULT_MAX_SIZE

    def __init__(self, model_path: Optional[os.PathLike] = None, max_size: Optional[int] = DEFAULT_MAX_SIZE,
                 threads: Optional[int] = 2, device: Optional[str] = None,
                 source_chroma: float = SOURCE_CHROMA, albedo: str = "intrinsic", **_ignored):
        import onnxruntime as ort

        self.model_path = Path(model_path) if model_path else DEFAULT_MODEL
        if not self.model_path.is_file():
            raise FileNotFoundError(f"embedded model not found: {self.model_path}")
        self.max_size = int(max_size) if max_size else DEFAULT_MAX_SIZE
        if self.max_size < 8:
            raise ValueError(f"max_size must be >= 8, got {max_size}")
        self.default_resolution = self.max_resolution = self.max_size
        threads = int(threads) if threads else 2
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        if device not in (None, "", "auto", "cpu"):
            raise ValueError(f"embedded estimator runs on cpu only, got device={device!r}")
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # no busy-waiting worker threads: the machine is shared (Blender, decoding, EXR I/O)
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(self.model_path), so, providers=["CPUExecutionProvider"])
        if not 0.0 <= float(source_chroma) <= 1.0:
            raise ValueError(f"source_chroma must be in [0, 1], got {source_chroma}")
        self.source_chroma = float(source_chroma)
        if albedo not in ALBEDO_METHODS:
            raise ValueError(f"albedo must be one of {ALBEDO_METHODS}, got {albedo!r}")
        self.albedo_method = albedo
        self.sha256 = _file_sha256(self.model_path)
        self.threads = threads

    def processing_size(self, h: int, w: int) -> tuple:
        """``(h, w)`` at which the network runs for an ``h x w`` frame (long side <= max_size)."""
        f = min(1.0, self.max_size / max(h, w))
        return max(1, int(round(h * f))), max(1, int(round(w * f)))

    def run_network(self, rgb: np.ndarray) -> Dict[str, np.ndarray]:
        """Raw network outputs at the processing size: name -> ``h x w (x C)`` float32."""
        h, w = rgb.shape[:2]
        ph, pw = self.processing_size(h, w)
        small = resize(rgb, (pw, ph), "area")
        outs = self.session.run(list(OUTPUT_NAMES), {"image": encode_input(small)})
        res = {}
        for name, o in zip(OUTPUT_NAMES, outs):
            o = o[0].transpose(1, 2, 0)
            res[name] = o[..., 0] if o.shape[-1] == 1 else o
        return res

    def predict(self, rgb: np.ndarray) -> EstimatorOutput:
        """Estimate G-buffers for one frame.

        Args:
            rgb: ``H x W x 3`` float32 scene-linear Rec.709 RGB (>= 0), any H, W >= 1.

        Returns:
            :class:`EstimatorOutput` at ``H x W``: relative depth (> 0, larger =
            farther, sky at the far value), unit camera-space OpenGL normals, linear
            albedo in [0, 1], metallic and roughness in [0, 1], confidence in [0, 1]
            (0 = sky). ``models`` maps ``gbuffer_editor/embedded`` to the first 12 hex
            digits of the ONNX file's SHA-256.

        Raises:
            ValueError: ``rgb`` is not ``H x W x 3`` with H, W >= 1.
        """
        rgb = np.asarray(rgb)
        if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.shape[0] < 1 or rgb.shape[1] < 1:
            raise ValueError(f"expected an H x W x 3 RGB frame, got shape {rgb.shape}")
        H, W = rgb.shape[:2]
        ph, pw = self.processing_size(H, W)
        small = resize(np.ascontiguousarray(rgb, dtype=np.float32), (pw, ph), "area")
        small = np.maximum(np.nan_to_num(small, nan=0.0, posinf=0.0, neginf=0.0), 0.0)
        o = self.run_network(small)
        o["normal"] = replicate_rim(o["normal"], NORMAL_RIM)
        depth_s, conf_s = disparity_to_depth(o["disparity"], o["sky"])
        o["albedo"] = source_chroma_albedo(o["albedo"], small, self.source_chroma)
        # one bilinear resize for all 10 channels: depth, confidence, normal (3), albedo (3),
        # metallic, roughness. Bilinear weights are convex, so [0, 1] values stay in [0, 1]
        # (up to rounding, removed below with cheap in-place min/max).
        stack = np.concatenate([depth_s[..., None], conf_s[..., None], o["normal"], o["albedo"],
                                o["metallic"][..., None], o["roughness"][..., None]], axis=-1)
        big = resize(np.ascontiguousarray(stack, dtype=np.float32), (W, H))
        np.maximum(big[..., 0], 1e-6, out=big[..., 0])
        unit = big[..., [1, 5, 6, 7, 8, 9]]
        np.minimum(unit, 1.0, out=unit)
        np.maximum(unit, 0.0, out=unit)
        n = big[..., 2:5]
        norm = n[..., 0] * n[..., 0] + n[..., 1] * n[..., 1] + n[..., 2] * n[..., 2]
        np.sqrt(norm, out=norm)
        bad = norm < 1e-6
        n = n / np.maximum(norm, 1e-6)[..., None]
        if bad.any():
            n[bad] = (0.0, 0.0, 1.0)
        depth = big[..., 0]
        conf = unit[..., 0]
        albedo = unit[..., 1:4]
        metallic = unit[..., 4]
        rough = unit[..., 5]
        provenance, pass_models = material_provenance(o["metallic"], o["roughness"])
        if self.albedo_method == "intrinsic":
            albedo, provenance["albedo"], pass_models["albedo"] = self.full_size_albedo(
                np.maximum(np.nan_to_num(rgb.astype(np.float32, copy=False)), 0.0), n, conf)
        return EstimatorOutput(
            depth=np.ascontiguousarray(depth), depth_kind="relative", normal=np.ascontiguousarray(n),
            albedo=np.ascontiguousarray(albedo), metallic=np.ascontiguousarray(metallic),
            roughness=np.ascontiguousarray(rough), confidence=np.ascontiguousarray(conf),
            models={MODEL_ID: self.sha256[:12]}, provenance=provenance, pass_models=pass_models,
            disparity=np.ascontiguousarray(np.where(conf_s > 0, o["disparity"], 0.0), dtype=np.float32),
        )

    def full_size_albedo(self, rgb: np.ndarray, normal: np.ndarray, confidence: Optional[np.ndarray]):
        """With ``albedo="intrinsic"``: :func:`backend.intrinsic.decompose_frame` on the
        full-size frame (see :meth:`Estimator.full_size_albedo`); ``None`` otherwise."""
        if self.albedo_method != "intrinsic":
            return None
        intr = decompose_frame(rgb, normal, confidence)
        if intr.ok:
            return intr.albedo, "estimated", INTRINSIC_ID
        return intr.albedo, "default", f"{INTRINSIC_ID} (no lit surface: constant 0.5)"

    def settings(self) -> Dict[str, object]:
        out = {"name": self.name, "max_size": self.max_size, "model": self.sha256[:12],
               "albedo": self.albedo_method, "normal_rim": NORMAL_RIM}
        if self.albedo_method == "network":
            out["source_chroma"] = self.source_chroma
        return out
