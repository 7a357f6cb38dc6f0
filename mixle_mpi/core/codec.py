"""Safe row codec: one observation <-> one compact JSON string.

Rows of arbitrary shape must survive a trip through the driver's shard file
exactly (results are bit-identical across recoveries), and reading the file
must never execute code, so pickle is out. Plain JSON keeps floats exact
(repr round-trips); tuples, dicts and ndarrays get a one-key tag object:
``{"__t": items}``, ``{"__d": [[key, value], ...]}`` (key types kept),
``{"__a": [dtype, shape, base64 bytes]}`` and ``{"__o": [shape, items]}``
for object arrays. Containers must be exactly list/tuple/dict/ndarray: a
subclass would come back as its base type, so it is refused instead.
"""

from __future__ import annotations

import base64
import json
import math

import numpy as np

__all__ = ["encode_row", "decode_row", "encode_value", "decode_value"]

_RAW_KINDS = "biufcSU"  # dtype kinds stored as raw bytes (exact, no code)


def _nonfinite() -> ValueError:
    return ValueError("row contains a NaN or infinite value; finite values are needed")


def _to_json(obj, exact: bool = False):
    if obj is None or type(obj) is str:
        return obj
    if exact and isinstance(obj, np.generic) and obj.dtype.kind in _RAW_KINDS:
        return {"__s": [obj.dtype.str, base64.b64encode(obj.tobytes()).decode("ascii")]}
    if type(obj) is bool or isinstance(obj, np.bool_):
        return bool(obj)
    if type(obj) is int or isinstance(obj, np.integer):
        return int(obj)
    if type(obj) is float or isinstance(obj, np.floating):
        value = float(obj)
        if not math.isfinite(value) and not exact:
            raise _nonfinite()
        return value
    if isinstance(obj, np.str_):
        return str(obj)
    if type(obj) is list:
        return [_to_json(x, exact) for x in obj]
    if type(obj) is tuple:
        return {"__t": [_to_json(x, exact) for x in obj]}
    if type(obj) is dict:
        return {"__d": [[_to_json(k, exact), _to_json(v, exact)] for k, v in obj.items()]}
    if type(obj) is np.ndarray:
        return _array_to_json(obj, exact)
    raise ValueError(
        f"cannot encode a row containing type {type(obj).__module__}.{type(obj).__qualname__}; "
        "supported: None, bool, int, float, str, list, tuple, dict, numpy scalars and ndarrays"
    )


def _array_to_json(arr: np.ndarray, exact: bool = False):
    kind, shape = arr.dtype.kind, list(arr.shape)
    if kind == "O":
        return {"__o": [shape, [_to_json(x, exact) for x in arr.reshape(-1)]]}
    if kind not in _RAW_KINDS or arr.dtype.fields is not None:
        raise ValueError(
            f"cannot encode an ndarray of dtype {arr.dtype}; "
            "needed a bool, integer, float, complex, bytes, str or object dtype"
        )
    if kind in "fc" and not exact and not np.isfinite(arr).all():
        raise _nonfinite()
    raw = base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode("ascii")
    return {"__a": [arr.dtype.str, shape, raw]}


def encode_row(obj) -> str:
    """Encode one observation as a compact, pure-ASCII JSON string."""
    return json.dumps(_to_json(obj), separators=(",", ":"), allow_nan=False)


def _reject_constant(name: str):
    raise _nonfinite()


def _shape(value) -> tuple:
    if type(value) is not list or not all(type(d) is int and d >= 0 for d in value):
        raise ValueError(f"bad encoded ndarray shape {value!r}")
    return tuple(value)


def _from_json(obj, exact: bool = False):
    if type(obj) is list:
        return [_from_json(x, exact) for x in obj]
    if type(obj) is not dict:
        return obj
    if len(obj) != 1:
        raise ValueError(f"bad encoded row: untagged object with keys {sorted(obj)!r}")
    ((tag, body),) = obj.items()
    if tag == "__t" and type(body) is list:
        return tuple(_from_json(x, exact) for x in body)
    if exact and tag == "__s" and type(body) is list and len(body) == 2:
        dtype = np.dtype(str(body[0]))
        if dtype.kind not in _RAW_KINDS or dtype.fields is not None:
            raise ValueError(f"bad encoded scalar dtype {body[0]!r}")
        return np.frombuffer(base64.b64decode(body[1], validate=True), dtype=dtype)[0]
    if tag == "__d" and type(body) is list:
        out = {}
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError(f"bad encoded dict item {pair!r}")
            try:
                out[_from_json(pair[0], exact)] = _from_json(pair[1], exact)
            except TypeError as exc:
                raise ValueError(f"bad encoded dict key: {exc}") from None
        return out
    if tag == "__a" and type(body) is list and len(body) == 3:
        try:
            dtype = np.dtype(str(body[0]))
        except TypeError:
            raise ValueError(f"bad encoded ndarray dtype {body[0]!r}") from None
        shape = _shape(body[1])
        if dtype.kind not in _RAW_KINDS or dtype.fields is not None:
            raise ValueError(f"bad encoded ndarray dtype {body[0]!r}")
        arr = np.frombuffer(base64.b64decode(body[2], validate=True), dtype=dtype)
        if arr.size != math.prod(shape):
            raise ValueError(f"bad encoded ndarray: {arr.size} values for shape {shape}")
        arr = arr.reshape(shape).copy()
        if dtype.kind in "fc" and not exact and not np.isfinite(arr).all():
            raise _nonfinite()
        return arr
    if tag == "__o" and type(body) is list and len(body) == 2 and type(body[1]) is list:
        shape = _shape(body[0])
        if len(body[1]) != math.prod(shape):
            raise ValueError(f"bad encoded object ndarray: {len(body[1])} items for shape {shape}")
        flat = np.empty(len(body[1]), dtype=object)
        for k, item in enumerate(body[1]):
            flat[k] = _from_json(item, exact)
        return flat.reshape(shape)
    raise ValueError(f"bad encoded row: unknown tag {tag!r}")


def decode_row(s: str):
    """Decode a string made by encode_row back into the original observation."""
    try:
        obj = json.loads(s, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(f"bad encoded row: {exc}") from None
    return _from_json(obj)


def encode_value(obj) -> str:
    """Type-exact encoding of a sufficient statistic (numpy scalar types kept, non-finite
    floats allowed): a round's received payloads are persisted with it, never pickled."""
    return json.dumps(_to_json(obj, exact=True), separators=(",", ":"), allow_nan=True)


def decode_value(s: str):
    """Inverse of :func:`encode_value`."""
    try:
        obj = json.loads(s)
    except json.JSONDecodeError as exc:
        raise ValueError(f"bad encoded value: {exc}") from None
    return _from_json(obj, exact=True)
