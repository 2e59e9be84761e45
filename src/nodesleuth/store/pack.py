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
    [[ints], ...] rows of any lengths (a matrix)        -> {"\\x02": rows}: lengths, then columns
    {"f": names, "r": rows} (a field-name table)        -> {"\\x03": names, "c": [column, ...]}
    {key: number, ...} all ints or all such floats      -> {"\\x04": keys, "v": values}
where keys that are decimal integers ("0".."95") are themselves an int array. Anything else stays
JSON. A record whose dicts use those marker keys themselves is refused (none does).
"""

from __future__ import annotations

from itertools import accumulate

import orjson

FORMAT = 1
MIN_LEN = 2  # shorter lists stay JSON
_MARKS = ("\x01", "\x02", "\x03", "\x04")
_SEQ = (list, tuple)


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


def _is_ints(v: list) -> bool:
    for x in v:
        if type(x) is not int:
            return False
    return True


def _decimals(v: list) -> int | None:
    """The fewest decimals (0..3) that give back every float of `v` exactly, or None."""
    for x in v:
        if type(x) is not float:
            return None
    for k in range(4):
        s = 10 ** k
        try:
            if all(round(x * s) / s == x for x in v):
                return k
        except (OverflowError, ValueError):  # inf, nan
            return None
    return None


_LIM = 1 << 62  # values (and their differences) within +-2^62 zigzag into 64 bits


def _put_ints(v, out: bytearray) -> None:
    """n, a header byte, then the values. Header: bit 0 set: differences from the previous value
    (a sorted column); bits 1-4: bytes per value w (0: all zero); bit 7 set: sparse, a bitmap of the
    non-zero values first and only they follow. Values are zigzag-coded, in w byte planes."""
    n = len(v)
    _varint(n, out)
    if not n:
        out.append(0)
        return
    lo, hi = min(v), max(v)
    if lo < -_LIM or hi >= _LIM:
        raise OverflowError  # beyond 64 bits: kept as JSON text
    zz = [x << 1 for x in v] if lo >= 0 else [(x << 1) ^ (x >> 63) for x in v]
    mz = max(zz)
    delta = False
    if n > 2 and mz >= 8:
        d = [b - a for a, b in zip(v, v[1:])]
        d.insert(0, v[0])
        dlo, dhi = min(d), max(d)
        if dhi - dlo < hi - lo:
            dz = [x << 1 for x in d] if dlo >= 0 else [(x << 1) ^ (x >> 63) for x in d]
            md = max(dz)
            if md < mz:
                delta, zz, mz = True, dz, md
    w = (mz.bit_length() + 7) >> 3
    if not delta and w > 1 and zz.count(0) * 2 >= n:
        # mostly zeros (NET_RX: only on the CPUs that serve the NIC's queues)
        out.append(0x80 | (w << 1))
        out += int("".join("1" if x else "0" for x in zz), 2).to_bytes((n + 7) >> 3, "big")
        _planes([x for x in zz if x], w, out)
        return
    out.append(delta | (w << 1))
    _planes(zz, w, out)


def _planes(vals: list[int], w: int, out: bytearray) -> None:
    if w == 1:
        out += bytes(vals)
    elif w:
        for k in range(w):
            sh = 8 * k
            out += bytes([(x >> sh) & 0xFF for x in vals])


def _get_planes(b, i: int, n: int, w: int) -> tuple[list[int], int]:
    if not w:
        return [0] * n, i
    vals = list(b[i:i + n])
    for k in range(1, w):
        i += n
        sh = 8 * k
        vals = [x | (y << sh) for x, y in zip(vals, b[i:i + n])]
    return vals, i + n


def _get_ints(b, i: int) -> tuple[list[int], int]:
    n, i = _read_varint(b, i)
    head = b[i]
    i += 1
    w = (head >> 1) & 0x0F
    if head & 0x80:
        size = (n + 7) >> 3
        bits = bin(int.from_bytes(b[i:i + size], "big"))[2:].zfill(size * 8)[size * 8 - n:]
        nz, i = _get_planes(b, i + size, bits.count("1"), w)
        it = iter(nz)
        vals = [next(it) if c == "1" else 0 for c in bits]
    else:
        vals, i = _get_planes(b, i, n, w)
    if any(x & 1 for x in vals):
        vals = [(x >> 1) ^ -(x & 1) for x in vals]
    else:
        vals = [x >> 1 for x in vals]
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

    def numbers(self, v: list):
        """The marker of a packed number list, or None when `v` is not one."""
        if _is_ints(v):
            return {"\x01": -1} if self.ints(v) else None
        k = _decimals(v)
        if k is not None:
            s = 10 ** k
            return {"\x01": k} if self.ints([round(x * s) for x in v]) else None
        return None

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
            elif first in _SEQ and all(type(r) in _SEQ and _is_ints(r) for r in v):
                mark = len(self.blob)
                if self.ints([len(r) for r in v]):
                    width = max(len(r) for r in v)
                    ok = all(self.ints([r[j] for r in v if len(r) > j]) for j in range(width))
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
                if self.numbers(vals) is not None:
                    return {"\x04": keys if ik is None else {"\x01": -1}, "v": {"\x01": k}}
                del self.blob[mark:]
        return {k: self.value(x) for k, x in d.items()}


def _int_keys(keys: list[str]) -> list[int] | None:
    """Keys that are canonical decimal integers ("0", "17", "-3"), as ints; else None."""
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
                rows: list[list[int]] = [[] for _ in lens]
                width = max(lens, default=0)
                for j in range(width):
                    col = self.ints()
                    it = iter(col)
                    for r, n in zip(rows, lens):
                        if n > j:
                            r.append(next(it))
                return rows
            if "\x03" in x:
                cols = [self.value(c) for c in x["c"]]
                return {"f": x["\x03"], "r": [list(r) for r in zip(*cols)]}
            if "\x04" in x:
                keys = x["\x04"]
                keys = [str(k) for k in self.ints()] if type(keys) is dict else keys
                return dict(zip(keys, self.value(x["v"])))
            return {k: self.value(v) for k, v in x.items()}
        if t is list:
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
