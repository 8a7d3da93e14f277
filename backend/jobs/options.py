"""``KEY=VALUE`` options of the command line (``--estimator-option``, ``--option``)."""
from __future__ import annotations

import json
import math
import numbers
from typing import Any, Dict, Iterable, Tuple

from ..arguments import INT64_MAX, short_repr


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
    if not finite_value(value):
        raise ValueError(f"{flag} {short_repr(text)}: {key.strip()} must be a finite number "
                         f"within +-{INT64_MAX}")
    return key.strip().replace("-", "_"), value


def finite_value(v: Any) -> bool:
    """No NaN, infinity or integer past 64 bits anywhere in an option value (numbers,
    lists, dicts): a 700-digit integer was an OverflowError deep in a job (issue 36)."""
    if isinstance(v, bool):
        return True
    if isinstance(v, numbers.Integral):
        return abs(int(v)) <= INT64_MAX
    if isinstance(v, numbers.Real):
        try:
            return math.isfinite(float(v))
        except OverflowError:
            return False
    if isinstance(v, (list, tuple)):
        return all(finite_value(x) for x in v)
    if isinstance(v, dict):
        return all(finite_value(x) for x in v.values())
    return True


def key_values(items: Iterable[str], flag: str = "--option") -> Dict[str, Any]:
    """Several :func:`key_value` items as a dict (a later key wins)."""
    return dict(key_value(item, flag) for item in items or [])
