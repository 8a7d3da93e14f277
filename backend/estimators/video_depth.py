"""Video Depth Anything on ONNX Runtime: depth for whole shots, in overlapping windows.

Model
-----
Video Depth Anything (Chen et al. 2025, "Video Depth Anything: Consistent Depth
Estimation for Super-Long Videos", arXiv:2501.12375; https://github.com/DepthAnything/Video-Depth-Anything)
is Depth Anything V2 with a spatio-temporal head: it takes a window of ``T`` frames
(``x``: ``1 x T x 3 x H x W`` float32, ImageNet mean/std normalised sRGB in [0, 1], H and
W multiples of 14, upstream ``VideoDepthAnything.forward``) and returns ``1 x T x H x W``
float32 *relative disparity* (>= 0 after the final ReLU, larger = nearer, one unknown
scale and shift per window). Only the **Small** checkpoint is Apache-2.0
(``depth-anything/Video-Depth-Anything-Small``, ``video_depth_anything_vits.pth``, 116 MB,
28.4 M parameters); Base and Large are CC-BY-NC-4.0 and not offered.

Upstream publishes the PyTorch checkpoint only; no ONNX export was found published on the
model hub (checked 2026-12). :data:`VIDEO_MODELS` therefore names the file an export
must have inside the models folder (Hugging Face cache layout of that repository,
``onnx/model.onnx``) with the graph names ``frames`` -> ``depth`` (layout above, T, H,
W fixed or dynamic); ``docs/models.md`` shows the export (fixed shapes: upstream's forward
bakes sizes while tracing, so the graph answers at its traced size only; this estimator
reads a fixed shape from the file and fits frames and windows to it). Nothing is
downloaded for it.

Windows (the published inference scheme, ``infer_video_depth``)
-----------------------------------------------------------------
Windows of ``window`` frames (upstream: 32) advance by ``window - overlap`` frames
(upstream overlap 10). The first ``overlap`` slots of each window after the first hold
*keyframes* of the previous window: its slots ``0`` and ``keyframe`` (upstream 12), which
give the scale/shift alignment, and its last ``interp = overlap - 2`` slots (upstream 8),
which are blended. Per window after the first:

1. least-squares scale ``s`` and shift ``t`` (in the network's disparity space) mapping
   the window's outputs at the two alignment keyframes onto the aligned outputs they had
   (the shot's first frame, and the previous window's keyframe);
2. its outputs for the ``interp`` overlap frames, aligned and clipped at 0, are blended
   linearly (weights 0 -> 1) with the previous window's aligned outputs of the same
   frames, which are then final;
3. its new frames are aligned (``s * d + t``, clipped at 0); the last ``interp`` wait for
   the next window.

The shot's tail is padded with copies of its last frame (as upstream). ``align=False``
skips step 1 (``s = 1, t = 0``), to show what the alignment does.

Streaming
---------
The decompose job is per frame; this estimator is fed the shot's frames in order
(:meth:`VideoDepthAnythingEstimator.feed`, at the processing size) and says which frame
numbers are complete; the job then computes those frames, taking each one's disparity
with :meth:`~VideoDepthAnythingEstimator.take` before :meth:`predict`. At most ``window``
network inputs are held (the carried keyframes plus the new frames) and at most
``window`` disparity maps (the frames done but not taken, the ``interp`` waiting for a
blend, two alignment references): :attr:`~VideoDepthAnythingEstimator.held` counts them.
:meth:`predict` without a :meth:`take` (a still image, the multi-view prior) runs the
network on that one frame (``T = 1``; a graph exported with a fixed ``T`` gets a window of
``T`` copies of the frame).

Fixed-shape graphs
------------------
Upstream's forward bakes sizes while tracing, so an ONNX export answers at its traced
``T x H x W`` only; docs/models.md exports with those shapes fixed in the graph's
signature. :func:`graph_shape` reads them; the window is then the graph's ``T``, and each
frame is fitted inside its ``H x W`` keeping the aspect (:func:`fit_box`), edge-padded,
and its output cropped back. With dynamic axes the network size is upstream's
(:meth:`VideoDepthAnythingEstimator.network_shape`).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..imaging import resize
from .onnx_depth import DepthAnythingEstimator, DepthModel, DepthModelError, network_size, upstream_size

#: the published inference settings (upstream ``INFER_LEN``, ``OVERLAP``, ``KEYFRAMES[1]``)
WINDOW, OVERLAP, KEYFRAME = 32, 10, 12

#: the video depth models, by estimator name
VIDEO_MODELS: Dict[str, DepthModel] = {
    "video-depth-anything-small": DepthModel(
        key="video-depth-anything-small",
        label="Video Depth Anything Small",
        repo_id="depth-anything/Video-Depth-Anything-Small",
        files={"fp32": "onnx/model.onnx"},
        # an fp32 export with upstream's code (issue 26's review: a 319 MB constant from its temporal
        # head); the published PyTorch checkpoint it is made from is 116 MB
        sizes_mb={"fp32": 435.0},
        licence="Apache-2.0",
        commercial_use=True,
        parameters_m=28.4,
        input_name="frames",
        output_name="depth",
        input_rank=5,
        published=False,
        source="https://github.com/DepthAnything/Video-Depth-Anything",
        extra_files=(),
    ),
}


def scale_and_shift(pred: np.ndarray, target: np.ndarray) -> Tuple[float, float]:
    """Least-squares ``s, t`` minimising ``sum((s * pred + t - target)^2)`` over all pixels
    (upstream ``compute_scale_and_shift`` with a full mask). ``(1, 0)`` when ``pred`` is
    constant."""
    p = np.asarray(pred, np.float64).ravel()
    q = np.asarray(target, np.float64).ravel()
    a00, a01, a11 = float(p @ p), float(p.sum()), float(p.size)
    b0, b1 = float(p @ q), float(q.sum())
    det = a00 * a11 - a01 * a01
    if det <= 1e-12 * max(a00 * a11, 1e-30):
        return 1.0, 0.0
    return (a11 * b0 - a01 * b1) / det, (-a01 * b0 + a00 * b1) / det


def graph_shape(session, input_name: str) -> Tuple[Optional[int], Optional[Tuple[int, int]]]:
    """``(T, (H, W))`` an ONNX session's ``[N, T, 3, H, W]`` input is fixed to; ``None`` for
    each that is dynamic (a named or unknown axis)."""
    dims = next(i.shape for i in session.get_inputs() if i.name == input_name)
    fixed = [d if isinstance(d, int) and d > 0 else None for d in dims]
    size = (fixed[3], fixed[4]) if fixed[3] and fixed[4] else None
    return fixed[1], size


def fit_box(h: int, w: int, gh: int, gw: int, multiple: int = 14) -> Tuple[int, int, int, int]:
    """Where an ``h x w`` frame goes inside a fixed ``gh x gw`` network input: ``(y0, x0,
    bh, bw)``, the largest box of the frame's aspect (each side a multiple of ``multiple``
    where the graph allows, at least one multiple) that fits, centred."""
    s = min(gh / h, gw / w)
    bh = min(gh, max(multiple, int(round(h * s / multiple)) * multiple))
    bw = min(gw, max(multiple, int(round(w * s / multiple)) * multiple))
    return (gh - bh) // 2, (gw - bw) // 2, bh, bw


def blend_weights(n: int) -> np.ndarray:
    """Weights of the newer window over ``n`` blended frames: 0 -> 1 linearly (upstream
    ``get_interpolate_frames``); one frame: 0.5."""
    return np.linspace(0.0, 1.0, n) if n >= 2 else np.full(n, 0.5)


class VideoDepthAnythingEstimator(DepthAnythingEstimator):
    """Video Depth Anything Small on onnxruntime, windowed over the shot (module docstring).

    Args:
        window: frames per network run, ``T`` (>= 4; upstream 32, the size the temporal
            head was trained at: larger is not advised).
        overlap: frames each window shares with the previous, ``2 <= overlap < window``
            (upstream 10): 2 alignment keyframes + ``overlap - 2`` blended frames.
        keyframe: the second alignment keyframe's slot (default: upstream's 12 scaled to
            ``window``, kept before the blended slots).
        align: scale/shift-align each window to the previous (the published scheme).
        model: registry key in :data:`VIDEO_MODELS` (default ``video-depth-anything-small``).
        **options: as :class:`.onnx_depth.DepthAnythingEstimator` (``model_file``,
            ``cache_dir``, ``local_files_only``, ``device``, ``threads``, ``materials``, ...).

    Raises:
        DepthModelError: the ONNX file is missing or not a Video Depth Anything export
            (one line naming the model and what to do). ValueError: a bad window setting.
    """

    name = "video-depth-anything-small"
    windowed = True

    def __init__(self, window: Optional[int] = None, overlap: Optional[int] = None, keyframe: Optional[int] = None,
                 align: bool = True, model: str = "video-depth-anything-small", **options):
        if model not in VIDEO_MODELS:
            raise KeyError(f"unknown video depth model {model!r}; known: {', '.join(sorted(VIDEO_MODELS))}")
        super().__init__(model=VIDEO_MODELS[model], **options)
        self.name = self.spec.key
        self.fixed_frames, self.fixed_size = graph_shape(self.session, self.spec.input_name)
        if window is None:
            window = self.fixed_frames or WINDOW
        window = int(window)
        if self.fixed_frames and window != self.fixed_frames:
            raise ValueError(f"window={window}: the ONNX file {self.model_path} was exported for windows of "
                             f"{self.fixed_frames} frames only (its input shape is fixed); use window="
                             f"{self.fixed_frames} or export another (docs/models.md)")
        overlap = int(overlap) if overlap is not None else max(2, min(OVERLAP, int(round(OVERLAP * window / WINDOW))))
        if window < 4 or not 2 <= overlap < window:
            raise ValueError(f"window must be >= 4 and 2 <= overlap < window, got window={window}, overlap={overlap}")
        self.window, self.overlap, self.interp = window, overlap, overlap - 2
        k = int(round(KEYFRAME * window / WINDOW)) if keyframe is None else int(keyframe)
        self.keyframe = min(max(k, 1), window - self.interp - 1)
        self.align = bool(align)
        self._box: Optional[Tuple[int, int, int, int]] = None  # content box inside a fixed-size input
        self.reset_stream()

    def settings(self) -> Dict[str, object]:
        out = super().settings()
        out.update(window=self.window, overlap=self.overlap, keyframe=self.keyframe, align=self.align,
                   graph_size=list(self.fixed_size) if self.fixed_size else None)
        return out

    def network_shape(self, h: int, w: int) -> Tuple[int, int]:
        """As the image model's (upstream's short side >= ``input_size``), with upstream
        ``infer_video_depth``'s cap for frames wider than 16:9 (``input_size`` scaled by
        ``1.777 / ratio``, to a multiple of 14); a fixed-size graph's fitted box as it is."""
        m = self.spec.multiple
        if self.fixed_size or self.fit == "frame":
            return network_size(h, w, m)
        size, ratio = self.input_size, max(h, w) / min(h, w)
        if ratio > 1.78:
            size = max(m, int(round(int(size * 1.777 / ratio) / m)) * m)
        return upstream_size(h, w, size, m)

    # ------------------------------------------------------------------ fixed-shape graphs
    def network_input(self, rgb: np.ndarray) -> np.ndarray:
        """As :meth:`.onnx_depth.DepthAnythingEstimator.network_input`; for a graph with a
        fixed ``H x W`` (:attr:`fixed_size`) the frame is resized to fit inside it keeping
        its aspect (a multiple of 14 on each side) and edge-padded to exactly ``H x W``
        (:func:`fit_box`); :meth:`_crop` takes the content back out of the output."""
        if not self.fixed_size:
            return super().network_input(rgb)
        gh, gw = self.fixed_size
        box = fit_box(rgb.shape[0], rgb.shape[1], gh, gw, self.spec.multiple)
        y0, x0, bh, bw = box
        x = super().network_input(resize(np.ascontiguousarray(rgb, dtype=np.float32), (bw, bh), "cubic")
                                  if (bh, bw) != rgb.shape[:2] else rgb)
        bh, bw = min(x.shape[1], gh), min(x.shape[2], gw)
        x = x[:, :bh, :bw]
        self._box = (y0, x0, bh, bw)
        if (bh, bw) == (gh, gw):
            return np.ascontiguousarray(x)
        return np.ascontiguousarray(np.pad(x, ((0, 0), (y0, gh - bh - y0), (x0, gw - bw - x0)), mode="edge"))

    def _crop(self, d: np.ndarray) -> np.ndarray:
        """The content box of a fixed-size output (``... x H x W``), else ``d``."""
        if not self.fixed_size or self._box is None:
            return d
        y0, x0, bh, bw = self._box
        return np.ascontiguousarray(d[..., y0:y0 + bh, x0:x0 + bw])

    def _run(self, inputs: List[np.ndarray]) -> np.ndarray:
        """The network on a window of inputs (``T x 3 x H x W``): ``T x h x w`` disparity >= 0
        (content box only). A graph that does not answer at this shape (an export that
        declares dynamic axes but traced its sizes in) is one line naming the file."""
        x = np.stack(inputs)[None]
        try:
            (out,) = self.session.run([self.spec.output_name], {self.spec.input_name: x})
        except Exception as e:  # noqa: BLE001 - onnxruntime's own message is many lines
            why = " ".join(str(e).split())[:160]
            raise DepthModelError(
                f"{self.spec.label} ({self.model_path}) does not run on a window of {x.shape[1]} frames at "
                f"{x.shape[3]}x{x.shape[4]}: the export traced fixed sizes while declaring them dynamic; export it "
                f"again with fixed shapes (docs/models.md) ({why})") from e
        d = np.maximum(np.nan_to_num(np.asarray(out, np.float32)[0], nan=0.0, posinf=0.0), 0.0)
        return self._crop(d)

    # ------------------------------------------------------------------ streaming
    def reset_stream(self) -> None:
        """Forget the shot: the next :meth:`feed` starts a new first window."""
        self._carry: List[np.ndarray] = []  # network inputs of the previous window's keyframes
        self._new: List[Tuple[int, np.ndarray]] = []  # (number, network input) of new frames
        self._refs: List[np.ndarray] = []  # aligned outputs of the two alignment keyframes
        self._tail: List[Tuple[int, np.ndarray]] = []  # aligned outputs waiting for the blend
        self._ready: "OrderedDict[int, Tuple[np.ndarray, int]]" = OrderedDict()  # number -> (disparity, window)
        self._current: Optional[Tuple[np.ndarray, int]] = None
        self.windows = 0  # windows run
        self.fits: List[Tuple[float, float]] = []  # (scale, shift) of each window after the first
        self.max_inputs_held = 0
        self.max_outputs_held = 0
        self.current_window: Optional[int] = None

    @property
    def held(self) -> Tuple[int, int]:
        """``(network inputs, disparity maps)`` held now."""
        return (len(self._carry) + len(self._new),
                len(self._refs) + len(self._tail) + len(self._ready) + (self._current is not None))

    def _count(self) -> None:
        i, o = self.held
        self.max_inputs_held = max(self.max_inputs_held, i)
        self.max_outputs_held = max(self.max_outputs_held, o)

    def feed(self, number: int, rgb: np.ndarray) -> List[int]:
        """Give the shot's next frame; returns the frame numbers whose disparity is now
        complete (in order), to be :meth:`take`-n.

        Args:
            number: the frame's number (increasing).
            rgb: ``H x W x 3`` float32 scene-linear RGB at the processing size (the same
                size for the whole shot).
        """
        self._new.append((int(number), self.network_input(np.asarray(rgb, np.float32))))
        self._count()
        if len(self._carry) + len(self._new) < self.window:
            return []
        return self._run_window()

    def finish(self) -> List[int]:
        """The shot ended: run the last, padded window and release every frame left. A shot
        that ended exactly at a window's end still runs one window of carried keyframes
        padded with copies of the last frame, so its last ``interp`` frames are blended like
        every other (upstream pads the shot to cover them the same way)."""
        done = self._run_window() if (self._new or self._tail) else []
        for n, d in self._tail:
            self._ready[n] = (d, self.windows - 1)
            done.append(n)
        self._tail = []
        self._carry = []
        return done

    def _run_window(self) -> List[int]:
        numbers = [n for n, _ in self._new]
        inputs = self._carry + [x for _, x in self._new]
        real = len(inputs)
        inputs += [inputs[-1]] * (self.window - real)  # the shot's tail: copies of its last frame
        d = self._run(inputs)
        T, O, I, K = self.window, self.overlap, self.interp, self.keyframe
        first = not self._refs
        done: List[int] = []
        if first:
            aligned, start = d, 0
            self.fits.append((1.0, 0.0))
        else:
            s, t = scale_and_shift(d[:2], np.stack(self._refs)) if self.align else (1.0, 0.0)
            self.fits.append((s, t))
            aligned = np.maximum(d * np.float32(s) + np.float32(t), 0.0)
            for (n, prev), new, w in zip(self._tail, aligned[2:O], blend_weights(I)):
                self._ready[n] = ((1.0 - w) * prev + w * new, self.windows if w >= 0.5 else self.windows - 1)
                done.append(n)
            start = O
        self._tail = []
        for slot, n in zip(range(start, T), numbers):
            if slot >= T - I and len(numbers) + start == T:  # waits for the next window's blend
                self._tail.append((n, aligned[slot]))
            else:
                self._ready[n] = (aligned[slot], self.windows)
                done.append(n)
        self._refs = [aligned[0], aligned[K]] if first else [self._refs[0], aligned[K]]
        self._carry = [inputs[0], inputs[K]] + inputs[T - I:T]
        self._new = []
        self.windows += 1
        self._count()
        return done

    def take(self, number: int) -> None:
        """Make ``number``'s disparity the one the next :meth:`predict` uses; frames before
        it that were never taken (skipped by a resumed job) are dropped.

        Raises:
            KeyError: ``number`` is not complete (not fed, or its window has not run).
        """
        while self._ready and next(iter(self._ready)) < number:
            self._ready.popitem(last=False)
        if number not in self._ready:
            raise KeyError(f"frame {number}: its window has not run")
        self._current = self._ready.pop(number)
        self.current_window = self._current[1]

    def disparity(self, rgb: np.ndarray) -> np.ndarray:
        """The taken frame's disparity (:meth:`take`), else this frame alone, resized
        (bilinear) to ``rgb``'s size: ``H x W`` float32 >= 0, larger = nearer.

        A frame alone runs as ``T = 1``, or, for a graph exported with a fixed ``T``
        (:attr:`fixed_frames`), as a window of ``T`` copies of the frame (upstream pads a
        shot's tail the same way), which costs ``T`` frames of compute."""
        h, w = rgb.shape[:2]
        if self._current is not None:
            d, _ = self._current
            self._current = None
        else:
            d = self._run([self.network_input(rgb)] * (self.fixed_frames or 1))[0]
        if d.shape != (h, w):
            d = resize(np.ascontiguousarray(d, dtype=np.float32), (w, h), "linear")
        return np.ascontiguousarray(d, dtype=np.float32)

    def report(self) -> Dict[str, object]:
        """For the manifest: windows run, their scale/shift fits, the most inputs and
        disparity maps held at once."""
        return {"window": self.window, "overlap": self.overlap, "keyframe": self.keyframe, "align": self.align,
                "windows": self.windows, "fits": [[round(s, 6), round(t, 6)] for s, t in self.fits],
                "max_inputs_held": self.max_inputs_held, "max_outputs_held": self.max_outputs_held}
