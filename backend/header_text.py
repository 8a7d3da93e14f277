"""Text in a frame's ``gbuffer/*`` header attributes: written and read back as the same
text (issue 36, item 10: a settings hash ``75942e4171335134`` came back as the float
``inf``). :func:`encode_header_value` / :func:`decode_header_value`, used by
:mod:`backend.contract`."""
from __future__ import annotations

import json
from typing import Any


#: header attributes that are text whatever they look like (hashes, ids, paths, names):
#: a file written before text that looks like JSON was stored quoted (see
#: :func:`encode_header_value`) keeps them raw, and a digest such as ``75942e4171335134``
#: must not come back as the float ``inf`` (issue 36, item 10)
TEXT_KEYS = frozenset({
    "settings_hash", "input_hash", "source", "source_real_path", "source_file", "estimator",
    "source_colorspace", "contract_version", "depth_kind", "relative_depth", "sar", "frames_spec",
    "depth_source",
})


def utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no surrogates from undecodable path bytes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode_header_value(key: str, v: Any) -> str:
    """One ``gbuffer/*`` header value of attribute ``key`` (without prefix) as text. A
    string of :data:`TEXT_KEYS` is stored as it is (``1.0``, ``75942e4171335134``), other
    strings too unless they would read back as JSON (``'true'``, ``'12'``): those are
    JSON-quoted, as is a text value ``'null'`` or one starting with ``"``, so every string
    reads back as the same string (:func:`decode_header_value`); anything else as JSON."""
    if isinstance(v, str):
        if not utf8(v):  # a path with bytes that are not UTF-8 (surrogates): JSON escapes, ASCII
            return json.dumps(v)
        if key in TEXT_KEYS:
            return json.dumps(v) if v == "null" or v.startswith('"') else v
        try:
            json.loads(v)
        except (ValueError, RecursionError):
            return v
    return json.dumps(v)


def decode_header_value(key: str, v: Any) -> Any:
    """The inverse of :func:`encode_header_value` for attribute ``key`` (without prefix):
    text stays text. A value of :data:`TEXT_KEYS` is kept as written (files of every
    version store them raw), unless JSON-quoted or ``null``; anything else is
    JSON-decoded where it parses (files written before issue 36 stored all strings raw,
    so an untyped string there that looks like a number still reads as one)."""
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if not isinstance(v, str):
        return v
    if key in TEXT_KEYS and not v.startswith('"'):
        return None if v == "null" else v
    try:
        return json.loads(v)
    except (ValueError, TypeError, RecursionError):
        return v
