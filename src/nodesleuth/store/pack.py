"""Numbers out of a JSON record into byte columns, and back, losslessly (tick schema 3).

A tick is JSON by field name (store/codec.py). Most of its bytes are numbers in arrays: per-CPU
jiffies, softirqs and IRQ counts per CPU, the process table's columns, ksoftirqd figures per CPU.
As JSON text they are digits and commas that zstd, compressing one second at a time, codes poorly.
`pack` walks the record and moves every such array into a binary blob: integers zigzag-coded,
optionally as differences from their neighbour (a sorted CPU column), and laid out in byte planes
(all low bytes, then all next bytes: a column of small counts is one plane of small bytes that
zstd's entropy coder packs into a few bits each). What stays, the record's shape with names, is
nearly the same every second and costs next to nothing against the segment's dictionary.

`unpack(pack(r)) == r` for every JSON record (tests/test_store_pack.py); the shapes it moves:
    [ints] or [floats with <= 3 decimals, exactly]      -> {"\\x01": decimals or -1}
    [[ints], ...] rows of any lengths (a matrix)        -> {"\\x02": rows}: lengths, then columns (0-padded)
    {"f": names, "r": rows} (a field-name table)        -> {"\\x03": names, "c": [column, ...]}
    {key: number, ...} all ints or all such floats      -> {"\\x04": keys, "v": values}
where keys that are decimal integers ("0".."95") are themselves an int array. Anything else stays
JSON. A record whose dicts use those marker keys themselves is refused (none does).
"""

from __future__ import annotations

import math
import struct
from itertools import accumulate, chain
from operator import itemgetter, sub

import orjson

FORMAT = 3  # 1, 2: earlier layouts of this branch (never in a released store)
MIN_LEN = 2  # shorter lists stay JSON
_MARKS = ("\x01", "\x02", "\x03", "\x04")
_SEQ = (list, tuple)
_SEQSET = {list, tuple}
_CONT = {list, dict}


def _varint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_varint(b, i: int) -> tuple[int, int]:
    shift = n = 0
    while True:
        x = b[i]
        i += 1
        n |= (x & 0x7F) << shift
        if x < 0x80:
            return n, i
        shift += 7


_INT, _FLOAT = {int}, {float}


def _is_ints(v) -> bool:
    return set(map(type, v)) <= _INT  # one C-level pass (a bool is not an int here: JSON true)


def _decimals(v: list) -> int | None:
    """The fewest decimals (0..3) that give back every float of `v` exactly, or None."""
    if set(map(type, v)) != _FLOAT:
        return None
    if 0.0 in v and any(x == 0 and math.copysign(1.0, x) < 0 for x in v):
        return None  # -0.0 would come back as 0.0 from the scaled integers (JSON keeps its sign)
    try:
        if all(map(float.is_integer, v)):
            return 0
        for k in range(1, 4):
            s = 10 ** k
            if all(round(x * s) / s == x for x in v):
                return k
    except (OverflowError, ValueError):  # inf, nan
        return None
    return None


_LIM = 1 << 62  # values (and their differences) within +-2^62 zigzag into 64 bits
_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}


def _width(m: int) -> int:
    return 0 if m == 0 else 1 if m < 0x100 else 2 if m < 0x10000 else 4 if m < 0x100000000 else 8


def _put_ints(v, out: bytearray) -> None:
    """n, a header byte, then the values. Header: bit 0: differences from the previous value (a
    sorted column); bits 1-4: bytes per value w (0: all zero; 1, 2, 4 or 8); bit 5: zigzag-coded
    (some value is negative); bit 7: sparse, a bitmap of the non-zero values first and only they
    follow. Values are laid out in w byte planes (all low bytes, then the next...)."""
    n = len(v)
    _varint(n, out)
    if not n:
        out.append(0)
        return
    lo, hi = min(v), max(v)
    if lo < -_LIM or hi >= _LIM:
        raise OverflowError  # beyond 64 bits: kept as JSON text
    vals, delta = v, False
    if n > 2 and hi - lo >= 16 and v[-1] - v[0] == hi - lo:  # ends at its extremes: maybe a sorted column
        d = [v[0], *map(sub, v[1:], v)]
        dlo, dhi = min(d), max(d)
        if max(dhi, -dlo) * 4 < max(hi, -lo):
            vals, delta, lo, hi = d, True, dlo, dhi
    signed = lo < 0
    if signed:
        vals = [(x << 1) ^ (x >> 63) for x in vals]
        hi = max(vals)
    w = _width(hi)
    head = delta | (w << 1) | (0x20 if signed else 0)
    if not delta and w > 1 and vals.count(0) * 2 >= n:
        # mostly zeros (NET_RX: only on the CPUs that serve the NIC's queues)
        out.append(0x80 | head)
        out += int("".join(["1" if x else "0" for x in vals]), 2).to_bytes((n + 7) >> 3, "big")
        _planes([x for x in vals if x], w, out)
        return
    out.append(head)
    _planes(vals, w, out)


def _planes(vals: list[int], w: int, out: bytearray) -> None:
    if w == 1:
        out += bytes(vals)
    elif w:
        raw = struct.pack(f"<{len(vals)}{_CODES[w]}", *vals)
        for k in range(w):
            out += raw[k::w]


def _get_planes(b, i: int, n: int, w: int) -> tuple[list[int], int]:
    if not w:
        return [0] * n, i
    if w == 1:
        return list(b[i:i + n]), i + n
    buf = bytearray(n * w)
    for k in range(w):
        buf[k::w] = b[i + k * n:i + (k + 1) * n]
    return list(struct.unpack(f"<{n}{_CODES[w]}", buf)), i + w * n


def _get_ints(b, i: int) -> tuple[list[int], int]:
    n, i = _read_varint(b, i)
    head = b[i]
    i += 1
    w = (head >> 1) & 0x0F
    if w not in (0, 1, 2, 4, 8):
        raise ValueError(f"packed record: {w}-byte values")
    if head & 0x80:
        size = (n + 7) >> 3
        bits = bin(int.from_bytes(b[i:i + size], "big"))[2:].zfill(size * 8)[size * 8 - n:]
        nz, i = _get_planes(b, i + size, bits.count("1"), w)
        it = iter(nz)
        vals = [next(it) if c == "1" else 0 for c in bits]
    else:
        vals, i = _get_planes(b, i, n, w)
    if head & 0x20:
        vals = [(x >> 1) ^ -(x & 1) for x in vals]
    if head & 1:
        vals = list(accumulate(vals))
    return vals, i


class _Packer:
    def __init__(self):
        self.blob = bytearray()

    def ints(self, v) -> bool:
        mark = len(self.blob)
        try:
            _put_ints(v, self.blob)
            return True
        except OverflowError:
            del self.blob[mark:]
            return False

    def numbers(self, v: list, k: int | None = None):
        """The marker of a packed number list, or None when `v` is not one (`k`: its decimals, -1 for
        ints, when known)."""
        if k is None:
            k = -1 if _is_ints(v) else _decimals(v)
        if k is None:
            return None
        if k < 0:
            return {"\x01": -1} if self.ints(v) else None
        s = 10 ** k
        return {"\x01": k} if self.ints([round(x * s) for x in v] if k else list(map(int, v))) else None

    def value(self, x):
        t = type(x)
        if t is dict:
            return self.obj(x)
        if t is list or t is tuple:  # a tuple is a JSON array too
            return self.lst(x)
        return x

    def lst(self, v: list):
        if len(v) >= MIN_LEN:
            first = type(v[0])
            if first is int or first is float:
                m = self.numbers(v)
                if m is not None:
                    return m
            elif first in _SEQ and set(map(type, v)) <= _SEQSET and _is_ints(chain.from_iterable(v)):
                mark = len(self.blob)
                lens = list(map(len, v))
                if self.ints(lens):
                    short, width = min(lens), max(lens)
                    # columns padded with 0 where a row is shorter (its length says where it ends)
                    ok = all(self.ints(list(map(itemgetter(j), v)) if j < short
                                       else [r[j] if len(r) > j else 0 for r in v]) for j in range(width))
                    if ok:
                        return {"\x02": len(v)}
                del self.blob[mark:]
        return [self.value(x) for x in v]

    def obj(self, d: dict):
        for m in _MARKS:
            if m in d:
                raise ValueError(f"record key {m!r} is reserved by store/pack.py")
        if len(d) == 2 and "f" in d and "r" in d and type(d["f"]) in _SEQ and type(d["r"]) in _SEQ:
            names, rows = list(d["f"]), d["r"]
            if names and rows and all(type(r) in _SEQ and len(r) == len(names) for r in rows):
                return {"\x03": names, "c": [self.lst([r[j] for r in rows]) for j in range(len(names))]}
        if len(d) >= 4:
            vals = list(d.values())
            k = -1 if _is_ints(vals) else _decimals(vals)
            if k is not None:
                mark = len(self.blob)
                keys = list(d)
                ik = _int_keys(keys)
                if ik is not None and not self.ints(ik):
                    ik = None
                if self.numbers(vals, k) is not None:
                    return {"\x04": keys if ik is None else {"\x01": -1}, "v": {"\x01": k}}
                del self.blob[mark:]
        return {k: self.value(x) for k, x in d.items()}


_KEYS: dict = {}  # key tuples seen -> their ints (every second has the same 96 CPU numbers)


def _int_keys(keys: list[str]) -> list[int] | None:
    """Keys that are canonical decimal integers ("0", "17", "-3"), as ints; else None."""
    t = tuple(keys)
    if t in _KEYS:
        return _KEYS[t]
    if len(_KEYS) > 64:
        _KEYS.clear()
    _KEYS[t] = got = _int_keys_of(keys)
    return got


def _int_keys_of(keys: list[str]) -> list[int] | None:
    out = []
    for k in keys:
        try:
            i = int(k)
        except ValueError:
            return None
        if str(i) != k:
            return None
        out.append(i)
    return out


class _Unpacker:
    def __init__(self, blob, at: int):
        self.b = blob
        self.i = at

    def ints(self) -> list[int]:
        v, self.i = _get_ints(self.b, self.i)
        return v

    def numbers(self, k: int) -> list:
        v = self.ints()
        if k < 0:
            return v
        s = 10 ** k
        return [x / s for x in v] if k else [float(x) for x in v]

    def value(self, x):
        t = type(x)
        if t is dict:
            if "\x01" in x:
                return self.numbers(x["\x01"])
            if "\x02" in x:
                lens = self.ints()
                width = max(lens, default=0)
                cols = [self.ints() for _ in range(width)]
                if not width:
                    return [[] for _ in lens]
                if min(lens) == width:
                    return list(map(list, zip(*cols)))
                return [list(r[:n]) for r, n in zip(zip(*cols), lens)]
            if "\x03" in x:
                cols = [self.value(c) for c in x["c"]]
                return {"f": x["\x03"], "r": [list(r) for r in zip(*cols)]}
            if "\x04" in x:
                keys = x["\x04"]
                keys = [str(k) for k in self.ints()] if type(keys) is dict else keys
                return dict(zip(keys, self.value(x["v"])))
            return {k: self.value(v) for k, v in x.items()}
        if t is list:
            if not set(map(type, x)) & _CONT:  # names, strings: nothing packed inside
                return x
            return [self.value(v) for v in x]
        return x


def pack(rec: dict) -> bytes:
    p = _Packer()
    skel = orjson.dumps(p.value(rec))
    head = bytearray([FORMAT])
    _varint(len(skel), head)
    return bytes(head) + skel + bytes(p.blob)


def unpack(data: bytes) -> dict:
    """The record `pack` was given; ValueError for bytes that are not a packed record."""
    try:
        if data[0] != FORMAT:
            raise ValueError(f"packed record format {data[0]} is not {FORMAT}")
        n, i = _read_varint(data, 1)
        skel = orjson.loads(data[i:i + n])
        u = _Unpacker(memoryview(data), i + n)
        rec = u.value(skel)
    except (IndexError, orjson.JSONDecodeError, StopIteration, TypeError, KeyError) as e:
        raise ValueError(f"undecodable packed record: {e}") from None
    if u.i != len(data):
        raise ValueError(f"undecodable packed record: {len(data) - u.i} bytes left over")
    return rec
