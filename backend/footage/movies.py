"""Movies through PyAV (FFmpeg): YUV -> RGB with the stream's matrix and range, its tagged
transfer and primaries (:func:`backend.colour.video_transform`: Rec.2020 and P3-D65
primaries converted, PQ/HLG refused without ``--colorspace``), rotation,
sample aspect, variable frame rate, VP9 alpha through libvpx, and the checks on truncated
or resized streams. Part of :mod:`backend.footage`.
"""
from __future__ import annotations

import re
from fractions import Fraction
from typing import Iterator, Optional

import numpy as np

from .. import colour, events
from ..imaging import resize
from .frames import (Footage, FootageError, FootageInfo, SourceFrame, TEXT_CODECS, check_frame_size,
    fit_long_side)


def _vp9_alpha_decoder(path: str, stream):
    """libvpx's VP9 decoder for a stream that carries alpha (WebM ``alpha_mode=1``), else
    ``None``.

    FFmpeg's native VP9 decoder ignores the alpha plane WebM keeps in each block's
    BlockAdditional; libvpx (``libvpx-vp9``) decodes it, giving ``yuva420p`` frames (third
    hostile trial: ``has_alpha: false``, alpha 1.0 everywhere). Where this FFmpeg build has
    no libvpx decoder, a ``warning`` says the alpha is dropped.
    """
    import av

    meta = {str(k).lower(): v for k, v in (stream.metadata or {}).items()}
    if stream.codec_context.name != "vp9" or str(meta.get("alpha_mode", "")).strip() != "1":
        return None
    try:
        ctx = av.CodecContext.create("libvpx-vp9", "r")
    except (av.error.FFmpegError, ValueError, KeyError) as e:
        events.warning(f"{path}: the VP9 stream carries alpha (alpha_mode=1) but this FFmpeg build has no "
                       f"libvpx VP9 decoder ({e}): the alpha is dropped, the frames are opaque", file=path)
        return None
    ctx.extradata = stream.codec_context.extradata
    ctx.thread_type = "AUTO"
    return ctx


# YUV matrix names for swscale, by AVColorSpace value
_SWS_CS = {1: "ITU709", 4: "FCC", 5: "ITU601", 6: "ITU601", 7: "SMPTE240M", 9: "BT2020", 10: "BT2020"}


class _MovieFootage(Footage):
    def __init__(self, path: str, colorspace, max_size, start_frame: Optional[int] = None):
        import av

        self._path = path
        self._cs = colorspace
        self._container = None
        try:
            self._container = av.open(path)
        except (av.error.FFmpegError, OSError) as e:
            raise FootageError(f"{path}: cannot open as a movie ({e})", file=path) from e
        try:
            vs = self._container.streams.video
            if not vs:
                kinds = sorted({s.type for s in self._container.streams}) or ["none"]
                raise FootageError(f"{path}: no video stream (streams: {', '.join(kinds)})", file=path)
            self._stream = stream = vs[0]
            cc = stream.codec_context
            fmt = getattr(stream, "format", None) if cc is not None else None
            if cc is None or fmt is None or not cc.name:
                tag = getattr(getattr(stream, "codec_tag", None), "strip", lambda: "")() or "unknown"
                raise FootageError(
                    f"{path}: unsupported video codec ({tag}); FFmpeg in this build cannot decode it "
                    "- convert the clip to H.264/ProRes/PNG frames first", file=path)
            if cc.name in TEXT_CODECS:  # FFmpeg renders text files as video ("tty" demuxer)
                raise FootageError(f"{path}: not a movie (FFmpeg reads it as text, codec {cc.name})",
                                   file=path)
            if cc.width and cc.height:
                check_frame_size(cc.width, cc.height, path)
            stream.thread_type = "AUTO"
            self._bits = max((c.bits for c in fmt.components), default=8)
            self._alpha = any(getattr(c, "is_alpha", False) for c in fmt.components) or \
                fmt.name.startswith(("yuva", "rgba", "bgra", "argb", "abgr", "gbrap", "ya"))
            self._vpx = _vp9_alpha_decoder(path, stream)
            pix_fmt = fmt.name
            if self._vpx is not None:
                self._alpha, pix_fmt = True, "yuva420p"
            self._decoder = self._decode()
            try:
                first = next(self._decoder)
            except StopIteration:
                raise FootageError(f"{path}: contains no decodable video frames", file=path) from None
            self._first = first
            try:
                self._matrix, self._linear, cs_name = colour.video_transform(
                    first.color_trc or cc.color_trc, first.color_primaries or cc.color_primaries, colorspace, path)
            except colour.ColourError as e:
                raise FootageError(str(e), file=path) from None
            rotation = int(round(getattr(first, "rotation", 0) or 0)) % 360
            if rotation == 0 and "rotate" in stream.metadata:
                try:
                    rotation = (-int(float(stream.metadata["rotate"]))) % 360
                except ValueError:
                    rotation = 0
            self._k = (rotation // 90) % 4 if rotation % 90 == 0 else 0
            w, h = first.width, first.height
            if self._k % 2:
                w, h = h, w
            ow, oh = fit_long_side(w, h, max_size)
            sar = stream.sample_aspect_ratio or Fraction(1)
            if sar <= 0:
                sar = Fraction(1)
            fps = stream.average_rate or stream.guessed_rate or stream.base_rate or Fraction(24)
            self.info = FootageInfo(
                path=path, kind="movie", width=w, height=h, out_width=ow, out_height=oh,
                fps=Fraction(fps), n_frames=(stream.frames or None), sar=Fraction(sar),
                rotation=self._k * 90, pix_fmt=pix_fmt, bit_depth=self._bits, codec=cc.name,
                colorspace=cs_name, has_alpha=self._alpha,
            )
            self.info.timecode = _timecode_tag(self._container, stream)
            self._start = 1 if start_frame is None else int(start_frame)
            if start_frame is not None:
                n = self.info.n_frames
                if not n:
                    raise FootageError(f"{path}: --start-frame needs the movie's length, which its container "
                                       "does not state; convert it to MP4/MOV first", file=path)
                self.info.numbers = list(range(self._start, self._start + int(n)))
        except BaseException:
            self.close()
            raise

    def _decode(self):
        import av

        n = 0
        try:
            if self._vpx is None:
                for frame in self._container.decode(self._stream):
                    n += 1
                    yield frame
                return
            for packet in self._container.demux(self._stream):  # the last, empty packet flushes
                for frame in self._vpx.decode(packet):
                    n += 1
                    yield frame
        except av.error.FFmpegError as e:
            raise FootageError(f"{self._path} (frame {n + 1}): decode failed ({e})",
                               frame=n + 1, file=self._path) from e

    def close(self) -> None:
        if self._container is not None:
            self._container.close()
            self._container = None

    def _to_rgb(self, frame, index: int):
        fmt_name = frame.format.name
        hi = self._bits > 8
        target = ("rgba64le" if hi else "rgba") if self._alpha else ("rgb48le" if hi else "rgb24")
        kw = {}
        is_rgb = getattr(frame.format, "is_rgb", False) or fmt_name.startswith(("rgb", "bgr", "gbr"))
        if not is_rgb and not fmt_name.startswith(("gray", "ya")):
            cs = _SWS_CS.get(int(frame.colorspace or 2))
            if cs is None:
                cs = "ITU709" if frame.height >= 720 else "ITU601"
            kw["src_colorspace"] = cs
            rng = int(frame.color_range or 0)
            kw["src_color_range"] = rng if rng in (1, 2) else (2 if fmt_name.startswith("yuvj") else 1)
        try:
            arr = frame.reformat(format=target, **kw).to_ndarray()
        except Exception as e:
            raise FootageError(f"{self._path} (frame {index + 1}): cannot convert {fmt_name} to RGB ({e})",
                               frame=index + 1, file=self._path) from e
        arr = arr.astype(np.float32) / (65535.0 if hi else 255.0)
        if self._k:
            arr = np.rot90(arr, k=self._k)
        arr = np.ascontiguousarray(arr)
        rgb = colour.to_scene_linear(arr[..., :3], self._cs, is_linear_file=self._linear)
        if self._matrix is not None:  # tagged Rec.2020 / P3-D65 primaries -> Rec.709
            rgb = np.ascontiguousarray(rgb @ self._matrix.T)
        alpha = np.ascontiguousarray(arr[..., 3]) if self._alpha else None
        return rgb, alpha

    def __iter__(self) -> Iterator[SourceFrame]:
        info = self.info
        tb = self._stream.time_base
        index = 0
        pending = [self._first] if self._first is not None else []
        self._first = None

        def frames():
            yield from pending
            yield from self._decoder

        for frame in frames():
            if frame.pts is not None and tb is not None:
                pts_s = float(frame.pts * tb)
            else:
                pts_s = index / float(info.fps)
            rgb, alpha = self._to_rgb(frame, index)
            if rgb.shape[:2] != (info.height, info.width):
                # refused like a sequence of mixed sizes (third hostile trial: a TS changing
                # from 64x48 to 96x48 was squeezed to 64x48 without a word)
                raise FootageError(
                    f"{self._path} (frame {index + 1}): the movie changes resolution mid-stream, to "
                    f"{rgb.shape[1]}x{rgb.shape[0]} from the {info.width}x{info.height} of frames 1-{index}; "
                    f"cut it into parts of one size (or scale it to one size) first",
                    frame=index + 1, file=self._path)
            rgb = resize(rgb, (info.out_width, info.out_height), "area")
            if alpha is not None:
                alpha = resize(alpha, (info.out_width, info.out_height), "area")
            yield SourceFrame(index, pts_s, rgb, alpha, self._path, index + self._start)
            index += 1
        if info.n_frames is not None and index < info.n_frames:
            # a cut or damaged file: FFmpeg's threaded decoding just stops early
            raise FootageError(
                f"{self._path}: the movie ends after frame {index} but declares {info.n_frames} frames "
                f"(truncated or corrupt file); frames 1-{index} decoded, the rest is missing",
                frame=index + 1, file=self._path)
        est = self._estimated_frames()
        if info.n_frames is None and est is not None and index < 0.9 * est - 2:
            # no frame count in the container (Matroska, WebM): its stated duration says how long it is
            raise FootageError(
                f"{self._path}: the movie ends after frame {index} but its stated duration implies about {est} "
                f"frames (truncated or corrupt file); frames 1-{index} decoded, the rest is missing",
                frame=index + 1, file=self._path)
        if info.n_frames is None and est is not None and index < est - 2:
            # within 10 %: a stated duration can be rounded or padded, so only a warning
            events.warning(f"{self._path}: the movie ends after frame {index} but its stated duration "
                           f"implies about {est} frames; the file may be cut (the last frames missing)",
                           file=self._path)

    def _estimated_frames(self) -> Optional[int]:
        """Frame count implied by the video stream's stated duration and the frame rate (for
        containers that do not state a count), or ``None``: the stream's own duration
        (or its Matroska ``DURATION`` tag), else the container's when it holds nothing but
        this stream (an audio track may be longer than the video)."""
        c, st = self._container, self._stream
        if c is None:
            return None
        seconds = None
        if st.duration and st.time_base:
            seconds = float(st.duration * st.time_base)
        else:
            tag = (st.metadata or {}).get("DURATION") or (st.metadata or {}).get("duration")
            m = re.match(r"^(\d+):(\d+):(\d+(?:\.\d+)?)$", str(tag or "").strip())
            if m:
                seconds = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
            elif len(c.streams) == 1 and c.duration and c.duration > 0:
                seconds = c.duration / 1_000_000
        if not seconds or seconds <= 0:
            return None
        return int(round(seconds * float(self.info.fps)))


def _timecode_tag(container, stream) -> Optional[str]:
    """The movie's start timecode, ``"HH:MM:SS:FF"``, from the video stream's or the
    container's ``timecode`` tag (MOV/MXF/MP4 tmcd), or ``None`` when absent or not a
    non-drop-frame timecode (a drop-frame ``;`` one is ignored with a warning: our
    headers count non-drop-frame)."""
    from .. import events
    from ..exr_attrs import parse_timecode

    text = (stream.metadata or {}).get("timecode") or (container.metadata or {}).get("timecode")
    if not text:
        return None
    try:
        parse_timecode(text)
    except ValueError as e:
        events.warning(f"{container.name}: source timecode ignored ({e}); the header timecode counts from "
                       f"the frame number", file=container.name)
        return None
    return text.strip()
