"""Reading a file a user or a folder names: one check for every path we read.

Every file the backend reads (``manifest.json``, manifest parts, camera files, depth
anchors, the look-match cache, footage images, G-buffer frames, checksummed outputs)
goes through :func:`open_regular` (or :func:`check_regular` right before a library
opens the path itself), so a FIFO, a device, a socket or a folder in its place is one
clear error naming it instead of a read that blocks forever (issue 36, item 1). JSON
is read by :func:`load_json`, which bounds the nesting (:data:`MAX_JSON_DEPTH`) and
names the file in every failure (item 2).

Errors are of the caller's kind (``error=``, an :class:`~backend.errors.InputError`
subclass by default), with ``file`` set.
"""
from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path
from typing import Any, Type

from .errors import InputError

#: deepest JSON nesting read from any file (a manifest nests 4 levels; a crafted file
#: of 200,000 levels is refused naming it rather than raising RecursionError)
MAX_JSON_DEPTH = 64

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISDIR, "a folder"))


def kind_of(mode: int) -> str:
    """Words for a non-regular file's type (``"a FIFO (named pipe)"``, ``"a folder"`` ...)."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "not a regular file"


def _refuse(path, what: str, mode: int, error: Type[Exception]) -> Exception:
    kind = kind_of(mode)
    text = f"{path}: {what} is {kind}, not a regular file; nothing is read from it (move it away or name a file)"
    e = error(text, file=path) if issubclass(error, InputError) else error(text)
    e.special_file = True  # callers that turn read failures into another message keep this one
    return e


def is_special_file_error(e: BaseException) -> bool:
    """Whether ``e`` is the refusal of a FIFO, device, socket or folder by this module."""
    return bool(getattr(e, "special_file", False))


def check_regular(path: os.PathLike, what: str = "the file", error: Type[Exception] = InputError) -> Path:
    """``path`` (symbolic links followed) if it is a regular file, for a library that
    opens the path itself.

    Raises:
        ``error``: it is a FIFO, socket, device or folder (naming it and its kind).
        OSError: it does not exist or cannot be looked at (FileNotFoundError ...).
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, what, st.st_mode, error)
    return Path(path)


def refuse_special(path: os.PathLike, what: str = "the file", error: Type[Exception] = InputError) -> None:
    """:func:`check_regular` for a library that opens the path itself and reports a
    missing or unreadable file in its own words: only a FIFO, socket, device or folder
    is refused here."""
    try:
        check_regular(path, what, error)
    except OSError:
        pass


def open_regular(path: os.PathLike, what: str = "the file", error: Type[Exception] = InputError,
                 text: bool = False, encoding: str = "utf-8"):
    """Open ``path`` for reading only if it is a regular file: opened without blocking
    (``O_NONBLOCK``: opening a FIFO never waits for a writer) and checked on the open
    descriptor, so nothing swapped in between a check and the open is read.

    Returns:
        a binary file object (``text=True``: text in ``encoding``, errors strict).

    Raises:
        ``error``: not a regular file (naming it and its kind).
        OSError: it does not exist or cannot be opened.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    if not hasattr(os, "O_NONBLOCK"):  # Windows: no FIFOs to block on; check the path first
        check_regular(path, what, error)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, what, st.st_mode, error)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return io.TextIOWrapper(f, encoding=encoding) if text else f


def read_text(path: os.PathLike, what: str = "the file", error: Type[Exception] = InputError) -> str:
    """The UTF-8 text of a regular file (:func:`open_regular`).

    Raises:
        ``error``: not a regular file, or not UTF-8 text (naming it).
        OSError: it cannot be read.
    """
    with open_regular(path, what, error) as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        text = f"{path}: {what} is not UTF-8 text ({e.reason} at byte {e.start})"
        raise (error(text, file=path) if issubclass(error, InputError) else error(text)) from None


def check_write_target(path: os.PathLike, what: str = "the file", error: Type[Exception] = InputError) -> Path:
    """``path`` if a file may be written there (by rename or directly): its folder exists
    and ``path`` is missing or a regular file. A FIFO, device, socket, folder or symbolic
    link there is never replaced (as root a write once swapped ``/dev/full`` for an
    EXR; issue 36).

    Raises:
        ``error``: the folder is missing or not a folder, or ``path`` is not a regular
            file (one line naming it).
    """
    def fail(text):
        return error(text, file=path) if issubclass(error, InputError) else error(text)

    p = Path(path)
    parent = p.parent
    if not parent.is_dir():
        raise fail(f"{path}: cannot write {what}: the folder {parent} does not exist or is not a folder")
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return p
    except OSError as e:
        raise fail(f"{path}: cannot write {what}: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode):
        raise fail(f"{path}: is a symbolic link; {what} is not written through it (remove it or name a file)")
    if not stat.S_ISREG(st.st_mode):
        raise fail(f"{path}: is {kind_of(st.st_mode)}, not a regular file; {what} is not written over it "
                   f"(move it away or name a file)")
    return p


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of a decoded JSON value (0 for a scalar), counted without recursion
    and stopping once past ``limit``."""
    depth, level = 0, [value]
    while True:
        containers = [v for v in level if isinstance(v, (dict, list))]
        if not containers or depth > limit:
            return depth
        depth += 1
        level = [c for v in containers for c in (v.values() if isinstance(v, dict) else v)]


def loads_bounded(text: str) -> Any:
    """``json.loads`` that raises RecursionError for nesting past :data:`MAX_JSON_DEPTH`
    (and for what the decoder cannot nest); ValueError for what is not JSON."""
    data = json.loads(text)
    if json_depth(data) > MAX_JSON_DEPTH:
        raise RecursionError("nested too deeply")
    return data


def loads_json(text: str, path: os.PathLike, what: str = "the file", error: Type[Exception] = InputError) -> Any:
    """``json.loads(text)`` of ``path``'s text, nesting bounded by :data:`MAX_JSON_DEPTH`.

    Raises:
        ``error``: not JSON, or nested deeper than the bound (naming the file).
    """
    def fail(why):
        msg = f"{path}: not valid JSON ({why}; {what})"
        return error(msg, file=path) if issubclass(error, InputError) else error(msg)
    try:
        value = json.loads(text)
    except RecursionError:
        raise fail(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:
        raise fail(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    if json_depth(value) > MAX_JSON_DEPTH:
        raise fail(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def load_json(path: os.PathLike, what: str = "the file", error: Type[Exception] = InputError) -> Any:
    """The JSON value of a regular file (:func:`open_regular`, :func:`loads_json`).

    Raises:
        ``error``: not a regular file, not UTF-8, not JSON, or nested too deeply (naming it).
        OSError: it cannot be read.
    """
    return loads_json(read_text(path, what, error), path, what, error)


def native_path(path: os.PathLike):
    """``path`` for a library that takes a ``str`` path it encodes as UTF-8 (OpenEXR): the
    ``str`` when it is valid UTF-8, else its bytes (``os.fsencode``: a name with bytes that
    are not UTF-8, such as ``bad\\xff\\xfe name``, read by Python as surrogates; issue 36)."""
    p = os.fspath(path)
    if isinstance(p, bytes):
        return p
    try:
        p.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(p)
    return p


def read_image_bgr(path: os.PathLike):
    """An 8-bit image file decoded by OpenCV (BGR), read through Python's ``open`` so any
    path works (``cv2.imread`` crashes on a path with non-UTF-8 bytes); ``None`` when
    it cannot be decoded.

    Raises:
        OSError: it cannot be read.
    """
    import cv2
    import numpy as np

    with open_regular(path) as f:
        data = np.frombuffer(f.read(), np.uint8)
    return cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
