"""The one JSON cleaner: what the project writes as results goes through :func:`json_safe` first.

NaN and infinities become ``None`` (strict JSON has neither), tensors and numpy arrays or scalars become Python
numbers and lists, tuples and sets become lists, paths and dtypes become strings, dict keys become strings.
Anything else raises with the fix instead of failing later inside ``json.dumps``.
"""

from __future__ import annotations

import math
from pathlib import PurePath

from .errors import PeagleError


def json_safe(obj):
    """``obj`` as plain JSON values (see the module docstring); raises :class:`PeagleError` for other types."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return [json_safe(v) for v in sorted(obj, key=repr)]
    if isinstance(obj, PurePath):
        return str(obj)
    if hasattr(obj, "tolist"):  # torch tensors, numpy arrays and numpy scalars
        return json_safe(obj.tolist())
    if type(obj).__module__ == "torch" and type(obj).__name__ == "dtype":
        from .precision import dtype_name  # torch is loaded: obj is one of its dtypes

        return dtype_name(obj)
    if hasattr(obj, "item") and callable(obj.item):  # other 0-d array-likes
        return json_safe(obj.item())
    raise PeagleError(f"A {type(obj).__name__} cannot be written to JSON. Fix: pass a number, string, bool, list "
                      "or dict (convert it first, e.g. float(x) or str(x)).")
