"""``KEY=VALUE`` options of the command line (``--estimator-option``, ``--option``)."""
from __future__ import annotations

import json
import math
from typing import Any, Dict, Iterable, Tuple


def key_value(text: str, flag: str = "--option") -> Tuple[str, Any]:
    """``"num-steps=4"`` -> ``("num_steps", 4)``: the key stripped, ``-`` as ``_``; the
    value parsed as JSON when it parses (numbers, ``null``, lists), else kept as text.

    Raises:
        ValueError: no ``=``, an empty key, or a number that is not finite (``NaN``,
            ``Infinity``: JSON as Python reads it; no option means them) (the message
            names ``flag``).
    """
    key, sep, val = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{flag} {text!r}: expected KEY=VALUE")
    try:
        value = json.loads(val)
    except ValueError:
        value = val
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{flag} {text!r}: {key.strip()} must be a finite number")
    return key.strip().replace("-", "_"), value


def key_values(items: Iterable[str], flag: str = "--option") -> Dict[str, Any]:
    """Several :func:`key_value` items as a dict (a later key wins)."""
    return dict(key_value(item, flag) for item in items or [])
