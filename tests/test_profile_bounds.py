"""The direct profiler's long-lived tables stay bounded on a node that runs for days (issue 38 part 5,
the soak): the symbol tables of mapped files (profile/usersyms.UserSymbols, least recently used out by
bytes and by count, a dropped file read again on its next use), the thread names and the
per-process stack parts (profile/decode.Decoder). Fed more distinct keys than the bound, each
stays under it, and what was dropped is named the same when it is needed again.

Inputs: real ELF files (built here with gcc, copied to distinct inodes as a node's new builds and
containers are), and side-band and sample records laid out as the kernel writes them into a perf ring
(include/uapi/linux/perf_event.h: PERF_RECORD_FORK/COMM/SAMPLE with the sample_id trailer the
direct reader asks for: tid, time, cpu)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess

from conftest import missing

from nodesleuth.profile.decode import Decoder
from nodesleuth.profile.procs import Maps
from nodesleuth.profile.ringbuf import COMM, COMM_EXEC, CONTEXT_KERNEL, CONTEXT_USER, EXIT, FORK, MMAP2, SAMPLE
from nodesleuth.profile.usersyms import UserSymbols

SRC = r"""
volatile unsigned long x;
__attribute__((noinline)) void ns_bound_inner(void) { for (int i = 0; i < 1000; i++) x += i; }
__attribute__((noinline)) void ns_bound_outer(void) { ns_bound_inner(); }
int main(void) { ns_bound_outer(); return 0; }
"""


def _elf(tmp_path) -> str:
    if shutil.which("gcc") is None:
        missing("gcc (to build an ELF file whose symbols are known)")
    src = tmp_path / "b.c"
    src.write_text(SRC)
    out = str(tmp_path / "ns-bound")
    subprocess.run(["gcc", "-O1", "-o", out, str(src)], check=True)
    return out


def _offset_of(us: UserSymbols, path: str, name: str) -> int:
    st = os.stat(path)
    t = us.file(path, "", (0, st.st_dev, st.st_ino)).table
    for i in range(len(t)):
        if t.name_of(int(t.idx[i])) == name:
            return int(t.starts[i])
    raise AssertionError(f"{name} not in {path}")


def _copies(tmp_path, elf: str, n: int) -> list[tuple[str, tuple]]:
    out = []
    for i in range(n):
        p = str(tmp_path / f"copy{i}")
        shutil.copy(elf, p)
        with open(p, "ab") as f:  # a distinct file (another build-id would be a new build; the bytes differ)
            f.write(b"\0" * (i + 1))
        st = os.stat(p)
        out.append((p, (0, st.st_dev, st.st_ino)))
    return out


def test_symbol_cache_stays_under_its_byte_bound_and_names_again_what_it_dropped(tmp_path):
    elf = _elf(tmp_path)
    probe = UserSymbols()
    off = _offset_of(probe, elf, "ns_bound_inner")
    one = probe.bytes
    assert one > 0
    us = UserSymbols(max_bytes=5 * one)
    files = _copies(tmp_path, elf, 40)
    for path, ident in files:
        us.file(path, "", ident)
        assert us.bytes <= 5 * one
        assert len(us.by_file) <= 5
    assert us.evicted == 35
    first_path, first_ident = files[0]
    assert (first_path, first_ident) not in us.by_file
    # dropped, then used again: read again, the same name
    assert us.file(first_path, "", first_ident).lookup(off) == "ns_bound_inner"
    assert us.file(files[-1][0], "", files[-1][1]).lookup(off) == "ns_bound_inner"
    assert us.bytes <= 5 * one


def test_symbol_cache_count_bound_keeps_the_recently_used(tmp_path):
    elf = _elf(tmp_path)
    us = UserSymbols(limit=3, max_bytes=1 << 40)
    files = _copies(tmp_path, elf, 10)
    for path, ident in files[:3]:
        us.file(path, "", ident)
    us.file(files[0][0], "", files[0][1])  # used again
    for path, ident in files[3:]:
        us.file(path, "", ident)
        assert len(us.by_file) <= 3
    assert (files[0][0], files[0][1]) not in us.by_file  # used long ago by now
    us2 = UserSymbols(limit=3, max_bytes=1 << 40)
    for path, ident in files[:3]:
        us2.file(path, "", ident)
    us2.file(files[0][0], "", files[0][1])
    us2.file(files[3][0], "", files[3][1])
    assert (files[0][0], files[0][1]) in us2.by_file  # the recently used one stays,
    assert (files[1][0], files[1][1]) not in us2.by_file  # the least recently used goes


# --- perf ring records (struct perf_event_header; sample_id_all trailer: pid/tid, time, cpu/res)

def _rec(typ: int, body: bytes, pid: int, tid: int, t: int, misc: int = 0) -> bytes:
    trailer = struct.pack("<iiQII", pid, tid, t, 0, 0)
    size = 8 + len(body) + len(trailer)
    return struct.pack("<IHH", typ, misc, size) + body + trailer


def _fork(pid, ppid, tid, ptid, t):
    return _rec(FORK, struct.pack("<iiiiQ", pid, ppid, tid, ptid, t), pid, tid, t)


def _exit(pid, ppid, tid, ptid, t):
    return _rec(EXIT, struct.pack("<iiiiQ", pid, ppid, tid, ptid, t), pid, tid, t)


def _comm(pid, tid, name, t, misc: int = 0):
    raw = name.encode() + b"\0"
    raw += b"\0" * (-len(raw) % 8)
    return _rec(COMM, struct.pack("<ii", pid, tid) + raw, pid, tid, t, misc)


def _mmap2(pid, tid, start, length, name, t):
    raw = name.encode() + b"\0"
    raw += b"\0" * (-len(raw) % 8)
    body = struct.pack("<iiQQQIIQQII", pid, tid, start, length, 0, 8, 1, 4242, 0, 5, 2) + raw
    return _rec(MMAP2, body, pid, tid, t)


def _sample(pid, tid, t, kips, uips):
    chain = [CONTEXT_KERNEL, *kips, CONTEXT_USER, *uips]
    body = struct.pack("<QiiQIIQQ", uips[0] if uips else 0, pid, tid, t, 0, 0, 1, len(chain))
    body += struct.pack(f"<{len(chain)}Q", *chain)
    return struct.pack("<IHH", SAMPLE, 2, 8 + len(body)) + body


BASE = 4_000_000  # tids above any this kernel hands out (pid_max is at most 2^22)


def test_thread_names_stay_under_their_bound():
    me = os.getpid()
    d = Decoder()
    d.COMM_LIMIT = 500
    for b in range(4):  # 4 x 400 threads
        d.decode(b"".join(_fork(me, me, BASE + b * 400 + i, me, 1000 + b * 1000 + i)
                          + _comm(me, BASE + b * 400 + i, "x", 1000 + b * 1000 + i) for i in range(400)))
        assert len(d.comm) <= 500


def test_stack_parts_of_many_processes_stay_under_their_bound():
    d = Decoder()
    d.PARTS_LIMIT = 1000
    kip = 0xFFFFFFFF81000000
    uip = 0x401000
    seen_max = 0
    t = 1000
    for b in range(6):  # 6 batches x 500 processes, each a user part of its own (parts are per process)
        recs = []
        for i in range(500):
            pid = BASE + b * 500 + i
            recs.append(_sample(pid, pid, t, [kip], [uip, uip + 16]))
            t += 1
        batch = d.decode(b"".join(recs))
        assert len(batch.stack_ids) == 500
        seen_max = max(seen_max, len(d.parts))
        assert len(d.parts) <= d.PARTS_LIMIT
    assert seen_max > 500  # the bound was reached, not avoided


def test_demangling_long_names_in_bulk_does_not_stall():
    """A table's aliases demangled in bulk: 400 C++ names of ~700 bytes each (a browser's templates are
    longer) are more than c++filt's two pipes hold; written all first and read after, both processes
    blocked on a full pipe and the profiler stopped for good (seen in the soak). Answered in full now."""
    import threading

    from nodesleuth.profile.demangle import Demangler

    if shutil.which("c++filt") is None:
        missing("c++filt (binutils), perf's demangler")
    parts = [f"ns_part{i:03d}_with_a_long_identifier" for i in range(30)]
    names, want = [], []
    for k in range(400):  # c++filt leaves names of very many components mangled: 20 here
        p = parts[k % 5:k % 5 + 19] + [f"leaf{k}"]
        names.append("_ZN" + "".join(f"{len(x)}{x}" for x in p) + "E")
        want.append("::".join(p))
    assert sum(len(n) for n in names) > 4 * 65536 // 2  # more than both pipes (64 KB each) hold
    dm = Demangler()
    got: list = []
    th = threading.Thread(target=lambda: got.append(dm.many(names)), daemon=True)
    th.start()
    th.join(60)
    try:
        assert not th.is_alive(), "c++filt and the profiler blocked each other"
        assert got[0] == want
    finally:
        if th.is_alive() and dm.proc is not None:
            dm.proc.kill()  # unblock the stuck thread so the test leaves nothing behind
            th.join(10)
        dm.close()


def test_processes_exiting_unsampled_in_their_batch_cost_no_map_copies(monkeypatch):
    """A busy node's churn: ~270 processes a second here, most exit before any sample of theirs. Each
    FORK (and exec) copied the parent's maps, for nothing: the copies were dropped at the batch's end, a
    burst of transient lists on the long-lived heap. Now only a process sampled, or forking, gets a copy;
    and a thread's exit does not count as its process's (its later maps are still taken)."""
    d = Decoder()
    parent = BASE - 1
    d.maps[parent] = Maps()
    for i in range(40):  # a parent with 40 maps
        d.maps[parent].add(0x400000 + i * 0x10000, 0x400000 + i * 0x10000 + 0x1000, 0, f"/lib{i}.so", (8, 1, i))
    d.gen[parent] = 0
    copies = []
    orig = Maps.copy
    monkeypatch.setattr(Maps, "copy", lambda self: copies.append(1) or orig(self))
    recs, t = [], 1000
    for i in range(1000):  # forked, exec'ed, exited: never sampled
        pid = BASE + i
        recs += [_fork(pid, parent, pid, parent, t), _comm(pid, pid, "sh", t + 1, COMM_EXEC),
                 _exit(pid, parent, pid, parent, t + 2)]
        t += 3
    kept = BASE + 5000  # forked and sampled: it starts with its parent's maps
    recs += [_fork(kept, parent, kept, parent, t), _sample(kept, kept, t + 1, [0xFFFFFFFF81000000], [0x400010])]
    # a process whose thread exits, not itself, takes its new map
    live = BASE + 6000
    d.maps[live], d.gen[live] = Maps(), 0
    recs += [_fork(live, live, live + 1, live, t + 2), _exit(live, live, live + 1, live, t + 3),
             _mmap2(live, live, 0x7000000, 0x1000, "/opt/new.so", t + 4)]
    d.decode(b"".join(recs))
    assert len(copies) == 1  # the old decoder: 2001 (each FORK, each exec)
    assert [r[4] for r in d.maps[kept].rows] == [r[4] for r in d.maps[parent].rows]
    assert "/opt/new.so" in [r[4] for r in d.maps[live].rows]


def test_a_symbol_table_holds_its_names_compressed(tmp_path):
    """A big C++ binary's string table is most of its symbol table's bytes (playwright's node: 18 of
    24 MB); held as read, the tables of a few such files filled the cache's bound. Held compressed
    (profile/elfsyms.PackedStrings), the table is smaller than its string table, names read the same."""
    if shutil.which("gcc") is None:
        missing("gcc (to build an ELF file whose symbols are known)")
    n = 3000
    src = tmp_path / "many.c"
    src.write_text("".join(f"int ns_a_rather_long_function_name_like_cxx_templates_make_{i:05d}(int x) "
                           f"{{ return x * {i + 3}; }}\n" for i in range(n)) + "int main(void) { return 0; }\n")
    out = str(tmp_path / "many")
    subprocess.run(["gcc", "-O0", "-o", out, str(src)], check=True)
    st = os.stat(out)
    t = UserSymbols().file(out, "", (0, st.st_dev, st.st_ino)).table
    names = {t.name_of(int(t.idx[i])) for i in range(len(t))}
    assert {f"ns_a_rather_long_function_name_like_cxx_templates_make_{i:05d}" for i in range(n)} <= names
    strtab = n * 64  # at least: the names alone
    assert t.nbytes() < strtab, (t.nbytes(), strtab)  # the old table: its string table and more


def test_kernel_symbols_are_held_as_arrays_not_objects(tmp_path):
    """The kernel's ~120k symbols were kept as Python ints and strings (18 MB of small objects for
    Debian 6.12's, for the process's life, pinning the arenas kallsyms' parse used: 52 MB of RSS). Now
    arrays and one block of names: a 50k-symbol kallsyms leaves few objects, and names the same."""
    import gc
    import sys

    from nodesleuth.profile.kallsyms import KernelSymbols

    n = 50_000
    path = tmp_path / "kallsyms"
    path.write_text("".join(f"{0xffffffff81000000 + 16 * i:016x} T ns_kernel_function_{i}\n" for i in range(n)))
    gc.collect()
    before = sys.getallocatedblocks()
    ks = KernelSymbols(kallsyms=str(path), modules="/nonexistent", kcore="/nonexistent")
    gc.collect()
    assert sys.getallocatedblocks() - before < 1000  # the old table: ~3 objects a symbol
    assert ks.name(0xffffffff81000000 + 16 * 4321 + 3) == ("ns_kernel_function_4321", "[kernel.kallsyms]")
    assert ks.name(0xffffffff81000000 + 16 * (n - 1))[0] == f"ns_kernel_function_{n - 1}"


def test_names_of_exited_threads_are_forgotten_a_batch_later():
    """A node that starts processes all day: each thread's name was kept until the table's bound
    (100,000, ~12 min of the soak's churn). Now a thread whose EXIT a batch saw is forgotten at the end
    of the next batch; a live thread keeps its name, and a tid reused (forked again) keeps its new one."""
    me = os.getpid()
    d = Decoder()
    live = BASE + 90_000
    d.decode(_fork(me, me, live, me, 500) + _comm(me, live, "alive", 501))
    t = 1000
    for b in range(5):  # 5 batches x 300 threads that start, are named and exit
        recs = []
        for i in range(300):
            tid = BASE + b * 300 + i
            recs += [_fork(me, me, tid, me, t), _comm(me, tid, f"w{b}", t + 1), _exit(me, me, tid, me, t + 2)]
            t += 3
        d.decode(b"".join(recs))
        assert len(d.comm) < 2 * 300 + 100  # this batch's and the last one's: the old decoder, all of them
    assert not any(BASE + i in d.comm for i in range(3 * 300))  # exited two batches ago or more: gone
    assert d.comm[live] == "alive"
    reused = BASE + 4 * 300  # exited in the last batch, then forked again: its name stays
    d.decode(_fork(me, me, reused, me, t) + _comm(me, reused, "again", t + 1))
    d.decode(_comm(me, live, "alive", t + 2))
    assert d.comm[reused] == "again"
    assert BASE + 4 * 300 + 1 not in d.comm


def test_stack_parts_of_exited_processes_are_dropped():
    """Parts are keyed per process: those of processes that exited were kept until the table's bound
    (50,000) although no later sample could use them. Now they go when the process's EXIT is seen; a
    live process's part stays and names its next samples without new naming."""
    d = Decoder()
    kip, uip = 0xFFFFFFFF81000000, 0x401000
    live = BASE + 90_000
    t = 1000
    sizes = []
    for b in range(6):  # 6 batches x 300 processes, each sampled once and exiting
        recs = [_sample(live, live, t, [kip], [uip, uip + 8])]
        for i in range(300):
            pid = BASE + b * 300 + i
            recs += [_sample(pid, pid, t + 1, [kip], [uip, uip + 16]), _exit(pid, 1, pid, 1, t + 2)]
            t += 3
        batch = d.decode(b"".join(recs))
        assert len(batch.stack_ids) == 301
        sizes.append(len(d.parts))
    assert max(sizes) < 50  # the old decoder: 300 more each batch (1,800 at the end)
    assert not any(k[2] >= BASE and k[2] != live for k in d.parts if len(k) == 4)
    assert any(k[2] == live for k in d.parts if len(k) == 4)
    assert set(d.pid_parts) <= {live}


def test_naming_tables_start_over_by_age():
    """Past MAX_AGE batches the part and frame tables start over (a node's stacks change: not every
    stack of the run is kept); the same samples are named the same after."""
    d = Decoder()
    d.MAX_AGE = 3
    kip, uip = 0xFFFFFFFF81000000, 0x401000
    t = 1000
    named = []
    for b in range(7):
        pid = BASE + b  # a new process each batch, alive: only the age bound can drop its part
        batch = d.decode(_sample(pid, pid, t, [kip], [uip, uip + 16]))
        named.append(batch.stacks[batch.stack_ids[0]])
        assert len(d.parts) <= 1 + 2 * d.MAX_AGE  # the old decoder: one more user part each batch
        t += 10
    assert len(set(named)) == 1


def test_aggregator_compacts_relative_to_its_open_windows():
    """The aggregator's stack table was compacted at a fixed 200,000 stacks: on a node with churn it
    grew for hours. Now it is compacted once it holds COMPACT_MIN more than twice what its open
    windows used at the last compaction; the records written are the same bytes."""
    import numpy as np

    from nodesleuth.profile.agg import Aggregator
    from nodesleuth.store.encoding import codec

    def run(compact_min):
        got = []
        a = Aggregator(lambda stream, rec: got.append((stream, codec(stream).frames(rec, None))), levels=(10, 60))
        a.COMPACT_MIN = compact_min
        peak = 0
        for w in range(40):  # 40 windows of 10 s, each with 60 stacks of its own
            stacks = [(f"main_{w}_{i}", "f") for i in range(60)]
            n = len(stacks)
            a.add_arrays(np.full(n, 1000.0 + w * 10), np.zeros(n, np.int64), np.full(n, 7, np.int64),
                         np.zeros(n, np.int64), np.arange(n, dtype=np.int64), ["x"], stacks)
            peak = max(peak, len(a.stacks))
        a.flush()
        return peak, got

    peak, got = run(100)
    # open: the current 10 s and 60 s windows (at most 7 x 60 stacks); kept: 100 more than twice that
    assert peak <= 100 + 3 * 7 * 60 + 60  # the old aggregator: all 2,400
    unbounded_peak, want = run(1 << 40)
    assert unbounded_peak == 40 * 60
    assert got == want


def test_demangler_cache_is_bounded():
    from nodesleuth.profile.demangle import Demangler

    dm = Demangler()
    dm.missing = True  # no c++filt needed: names come back as given, cached all the same
    dm.LIMIT = 100
    for i in range(1000):
        assert dm(f"_Zname{i}") == f"_Zname{i}"
        assert len(dm.cache) <= 101
    dm.many([f"_Zother{i}" for i in range(500)], chunk=50)
    assert len(dm.cache) <= 100 + 500


def test_ten_minute_and_hour_levels_merged_from_records_count_the_same():
    """The ten-minute and hour windows held every stack of their window in the aggregator's tables
    (an hour of a churning node's stacks); they are now built from the records of the level below,
    merged when they close. Over two hours of batches with a new stack in each, every record of every
    level counts the same (cpu, pid, comm, stack frames) as before, and the tables hold far fewer stacks."""
    from collections import Counter

    import numpy as np

    from nodesleuth.profile.agg import Aggregator
    from nodesleuth.store.aggregates import AggRecord, encode_agg

    rng = np.random.default_rng(38)
    base = [("main", f"f{i}", f"g{j}") for i in range(3) for j in range(4)]
    batches = []
    t = 3600.0 * 5 + 1234  # starts mid-hour, mid-ten-minutes
    for k in range(800):  # 800 batches of 10 s: over two hours
        n = 40
        stacks = base + [("main", f"new{k}")]
        batches.append((np.sort(t + rng.uniform(0, 10, n)), rng.integers(0, 4, n), rng.integers(1, 30, n),
                        rng.integers(0, 3, n), rng.integers(0, len(stacks), n), ["a", "b", f"c{k % 7}"], stacks))
        t += 10

    def run(merged_from):
        got = []
        a = Aggregator(lambda stream, rec: stream.name.startswith("profile_agg")
                       and got.append((stream.name, *encode_agg(rec))))
        a.MERGED_FROM = merged_from
        a.COMPACT_MIN = 50
        peak = 0
        for tt, cpu, pid, cm, st, comms, stacks in batches:
            a.add_arrays(tt, cpu, pid, cm, st, comms, stacks)
            peak = max(peak, len(a.stacks))
        a.flush()
        return got, peak

    def counts(payload):
        r = AggRecord(payload)
        cpu, pid, cm, st, n = r.rows(None)
        frames, sf = r.frames, r.stack_frames
        return Counter({(c, p, r.comms[x], tuple(frames[f] for f in sf[s])): k
                        for c, p, x, s, k in zip(cpu.tolist(), pid.tolist(), cm.tolist(), st.tolist(), n.tolist())})

    new, new_peak = run(2)
    old, old_peak = run(99)  # no merged level: every level from rows, as before
    assert [(s, t0) for s, t0, _ in new] == [(s, t0) for s, t0, _ in old]
    assert {s for s, _, _ in new} >= {"profile_agg600", "profile_agg3600", "profile_agg3600all"}
    for (s, t0, p), (_, _, q) in zip(new, old):
        assert counts(p) == counts(q), (s, t0)
        assert sorted(AggRecord(p).hashes.tolist()) == sorted(AggRecord(q).hashes.tolist())
    assert new_peak < old_peak / 2, (new_peak, old_peak)


def test_symbol_tables_no_stack_used_for_a_while_are_dropped(tmp_path):
    """Programs a node ran a while ago (tests, jobs, one-off tools): their tables were kept until the
    byte bound pushed them out. Now a file no stack used for max_idle batches is dropped; one in use
    stays, and a dropped one is read again, the same names, when a stack uses it again."""
    elf = _elf(tmp_path)
    probe = UserSymbols()
    off = _offset_of(probe, elf, "ns_bound_inner")
    us = UserSymbols(max_idle=3)
    files = _copies(tmp_path, elf, 8)
    for path, ident in files:
        us.file(path, "", ident)
    full = us.bytes
    hot_path, hot_ident = files[0]
    for _ in range(5):  # 5 batches: only the first file is used
        assert us.file(hot_path, "", hot_ident).lookup(off) == "ns_bound_inner"
        us.expire()
    assert list(us.by_file) == [(hot_path, hot_ident)]  # the old cache: all 8, until its byte bound
    assert us.bytes < full / 4
    assert set(us.last) == {(hot_path, hot_ident)}
    path, ident = files[5]
    assert us.file(path, "", ident).lookup(off) == "ns_bound_inner"
    assert len(us.by_file) == 2
