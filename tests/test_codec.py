"""Row codec: exact round trips (types, dtypes, float bits) and strict rejection."""

from __future__ import annotations

import collections
import enum
import math
import struct

import numpy as np
import pytest

from mixle_mpi.core.codec import decode_row, encode_row


def assert_same(a, b):
    """Equal values AND equal types all the way down (ndarrays: dtype, shape, bytes)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.dtype.kind == "O":
            for x, y in zip(a.reshape(-1), b.reshape(-1), strict=False):
                assert_same(x, y)
        else:
            assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=False):
            assert_same(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=False):
            assert_same(ka, kb)
            assert_same(va, vb)
    elif isinstance(a, float):
        assert struct.pack("<d", a) == struct.pack("<d", b)
    else:
        assert a == b


def roundtrip(obj):
    s = encode_row(obj)
    assert isinstance(s, str) and s.isascii()
    return decode_row(s)


def test_encoding_is_compact_json():
    assert (
        encode_row([1, (2.5, "a b"), {"k": None}]) == '[1,{"__t":[2.5,"a b"]},{"__d":[["k",null]]}]'
    )


@pytest.mark.parametrize(
    "obj",
    [
        None,
        True,
        False,
        0,
        -7,
        2**80,
        1.5,
        -0.0,
        5e-324,
        1.7976931348623157e308,
        0.1 + 0.2,
        "",
        "a",
        'h\u00e9llo \u2028 \U0001f600 "q" \\',
        [],
        (),
        {},
        (1.5, "a", 3),
        [1, [2, [3, (4,)]]],
        [0.5, 1.25, -3.0e-300],
        {"a": 1, 1: "a", "1": 2.5, (1, "x"): [None], 2.5: "f", None: ()},
        {"__t": [1], "__a": "not a tag"},
        ["__t", {"__d": {"__o": 1}}],
    ],
)
def test_plain_round_trip(obj):
    assert_same(roundtrip(obj), obj)


def test_dict_keys_keep_type_and_order():
    row = {2: "two", "2": "str two", 1: "one"}
    back = roundtrip(row)
    assert list(back) == [2, "2", 1] and type(list(back)[0]) is int


def test_random_floats_bit_exact():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**63, size=2000, dtype=np.uint64).view(np.float64)
    values = [float(x) for x in bits if np.isfinite(x)] + [
        float(x) for x in rng.standard_normal(500)
    ]
    assert_same(roundtrip(values), values)


def test_numpy_scalars_become_python_scalars():
    row = [
        np.float64(0.1),
        np.float32(0.1),
        np.float16(1.5),
        np.int64(-3),
        np.uint8(200),
        np.bool_(True),
        np.str_("s"),
    ]
    back = roundtrip(row)
    assert_same(back, [0.1, float(np.float32(0.1)), 1.5, -3, 200, True, "s"])


@pytest.mark.parametrize(
    "arr",
    [
        np.array([1.5, -0.0, 5e-324, 1e308]),
        np.arange(24, dtype=">f4").reshape(2, 3, 4) / 7,
        np.array([1.5, 2.25], dtype=np.float16),
        np.array([[1, -2], [3, 4]], dtype=np.int8),
        np.array([2**64 - 1], dtype=np.uint64),
        np.array([True, False]),
        np.array([1 + 2j, -0.5j], dtype=np.complex64),
        np.array(["ab", "c\u00e9"]),
        np.array([b"x", b"yz"]),
        np.array(3.25),
        np.zeros((0, 3)),
        np.arange(12.0).reshape(3, 4).T,  # non-contiguous
        np.arange(10, dtype=np.int32)[::3],
        np.array([[1, "a"], [(2, 3), None]], dtype=object),
        np.array([np.array([1.0]), [1, 2]], dtype=object),
    ],
)
def test_ndarray_round_trip_keeps_dtype_shape_bits(arr):
    back = roundtrip(arr)
    assert_same(back, arr)
    assert back.flags.writeable


def test_nested_row_with_arrays():
    row = (np.array([0.25, 1e-310]), [1, 2], {"w": np.arange(3, dtype=np.int16), 4: (None, True)})
    assert_same(roundtrip(row), row)


@pytest.mark.parametrize(
    "obj",
    [
        float("nan"),
        float("inf"),
        -math.inf,
        [1.0, (2.0, {"k": float("nan")})],
        {float("inf"): 1},
        np.float64("nan"),
        np.float32("-inf"),
        np.array([1.0, np.nan]),
        np.array([[0j, complex(0, math.inf)]]),
        np.array([np.array([np.nan])], dtype=object),
    ],
)
def test_nan_and_inf_rejected(obj):
    with pytest.raises(ValueError, match="NaN or infinite"):
        encode_row(obj)


Point = collections.namedtuple("Point", "x y")
Color = enum.IntEnum("Color", "RED")


@pytest.mark.parametrize(
    "obj, name",
    [
        ({1, 2}, "set"),
        (b"raw", "bytes"),
        (1 + 2j, "complex"),
        (object(), "object"),
        (Point(1, 2), "Point"),
        (collections.OrderedDict(a=1), "OrderedDict"),
        ([1, (2, frozenset())], "frozenset"),
        (np.ma.array([1.0]), "MaskedArray"),
        (np.complex128(1), "complex128"),
        (Color.RED, "Color"),
    ],
)
def test_unsupported_types_rejected_by_name(obj, name):
    with pytest.raises(ValueError, match=name):
        encode_row(obj)


@pytest.mark.parametrize("dtype", ["datetime64[s]", "i4,f8"])
def test_unsupported_dtypes_rejected(dtype):
    with pytest.raises(ValueError, match="dtype"):
        encode_row(np.zeros(2, dtype=dtype))


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        "[1, Infinity]",
        "-Infinity",
        "{",
        '{"a": 1}',
        '{"__x": 1}',
        '{"__t": 1, "__d": []}',
        '{"__d": [[[1], 2]]}',
        '{"__d": [[1]]}',
        '{"__a": ["|O", [1], ""]}',
        '{"__a": ["<f8", [2], "AAAAAAAA+D8="]}',
        '{"__a": ["<f8", [-1], ""]}',
        '{"__a": ["not a dtype", [0], ""]}',
        '{"__a": ["<f8", [1], "!!"]}',
        '{"__a": ["<f8", [1], "AAAAAAAA+H8="]}',
        '{"__o": [[2], [1]]}',
    ],
)
def test_decode_rejects_bad_input(text):
    with pytest.raises(ValueError):
        decode_row(text)
