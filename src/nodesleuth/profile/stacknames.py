"""Naming stacks as `perf script` (perf 6.1) names them, so a stack read from the kernel's ring buffers
folds exactly as stackcollapse-perf.pl folds perf script's text (tests/test_profile_direct.py compares
both on the same live samples): kernel addresses from kallsyms (profile/kallsyms.py), user ones from
the process's maps and its files' ELF symbol tables (profile/usersyms.py, elfsyms.py, debuginfo.py,
demangle.py), JIT maps from /tmp/perf-PID.map (profile/perfmap.py), each address once; an address in
no map is `[unknown]`. A callchain part (kernel or user) is named once, when first seen, and parts
with the same frames are one part."""

from __future__ import annotations

from itertools import chain

import numpy as np

from ..node.root import Root
from .arrays import distinct
from .procs import ANON, FILE, VDSO, Maps, Processes
from .ringbuf import CONTEXT_HV, CONTEXT_KERNEL, CONTEXT_MAX, CONTEXT_USER
from .demangle import Lazy
from .kallsyms import KernelSymbols
from .parse import frame_names
from .usersyms import UserSymbols

_rng = np.random.default_rng(0x6E73)  # fixed: the same stack hashes alike in every run (tests, reruns)
MULT = (_rng.integers(1, 2**63, size=1024, dtype=np.uint64) << np.uint64(1)) | np.uint64(1)  # odd multipliers
MULT2 = (_rng.integers(1, 2**63, size=1024, dtype=np.uint64) << np.uint64(1)) | np.uint64(1)
MIX_PID, MIX_GEN, MIX_GEN2 = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F),
                              np.uint64(0x165667B19E3779F9))


def frame(ip: int, sym: str, dso: str) -> tuple[str, ...]:
    """The folded frame names of one address perf script would print as `ip sym (dso)`."""
    return frame_names(f"\t{ip:x} {sym} ({dso})") or ()


class StackNames(Processes):
    """Frame and part tables and the symbol caches behind them (the Decoder's naming half)."""

    STACK_LIMIT = 200_000  # distinct (process, callchain) keys kept; past it the caches start over
    # user parts are keyed per process (and map version): on a node that starts processes all day their
    # keys pile up for processes long gone, ~200 bytes each; past this the part tables start over (the
    # frame caches stay, so naming them again is a dict lookup per frame)
    PARTS_LIMIT = 50_000
    # and by age: a node's stacks change (new programs, new kernel paths), and naming them again costs
    # a dict lookup per frame where the frame caches hold them, one symbol-table search where not:
    # every this many batches (~5 min of the recorder's 10 s batches) the part and frame tables start
    # over, so they hold what recent batches named, not every stack of the run (the soak of issue 38:
    # ~20 new parts a second, RSS +34 MB/h)
    MAX_AGE = 30

    def __init__(self, max_stack: int = 127, root: Root = Root("/")):
        super().__init__(root)
        self.max_stack = max_stack
        self.kernel = KernelSymbols(f"{self.proc}/kallsyms", f"{self.proc}/modules", f"{self.proc}/kcore")
        self.user = UserSymbols()
        # stack parts: (hash, hash2, pid[, gen]) -> id; id -> names (root first); (kernel id << 32 | user id) -> stack
        self.parts: dict[tuple, int] = {(0, 0, 0): 0}
        self.part_names: list[tuple[str, ...]] = [()]
        self.combos: dict[int, tuple[str, ...]] = {}
        self.kcache: dict[int, tuple[str, ...]] = {}
        self.fnames: dict[tuple[str, str], tuple[str, ...]] = {}  # (symbol, dso) -> frame names
        self.fcache: dict[tuple, tuple[str, ...]] = {}
        self.named = 0  # distinct stacks named
        # frames (the names one address stands for) by id; 0: an address in no map
        self.frames: list[tuple[str, ...]] = [("[unknown]",)]
        self.frame_id: dict[tuple[str, ...], int] = {("[unknown]",): 0}
        self.frames_gen = 0  # bumped when the frame table starts over: per-table frame ids are then stale
        self.named_parts: dict[tuple, int] = {}  # (frame-id hashes, length) -> part id: user parts by their names
        self.pid_parts: dict[int, list[tuple]] = {}  # pid -> its keys in parts: dropped when it exits
        self.age = 0  # batches since the tables started over

    def _kframe(self, ip: int) -> tuple[str, ...]:
        f = self.kcache.get(ip)
        if f is None:
            sym, dso = self.kernel.name(ip)
            f = self.kcache[ip] = frame(ip, sym, dso)
        return f

    def _frame(self, ip: int, sym: str, dso: str) -> tuple[str, ...]:
        """frame() by (symbol, dso): a user frame's names do not depend on its address."""
        key = (sym, dso)
        f = self.fnames.get(key)
        if f is None:
            f = self.fnames[key] = frame(ip, sym, dso)
        return f

    def _uframe(self, pid: int, m: Maps | None, ip: int) -> tuple[tuple[str, ...], bool]:
        row = m.find(ip) if m is not None else None
        if row is None:
            return ("[unknown]",), False
        start, end, pgoff, kind, name, ident, fid = row
        off = ip - start + pgoff
        if kind == FILE:
            key = (fid, off)
            f = self.fcache.get(key)
            if f is None:
                fs = self.user.file(name, self._root(pid), ident)
                sym = fs.lookup(off)
                f = self.fcache[key] = self._frame(ip, sym if sym is not None else "[unknown]", name)
            return f, True
        if kind == VDSO:
            sym = self.user.vdso_symbols().lookup(off)
            return self._frame(ip, sym if sym is not None else "[unknown]", "[vdso]"), True
        if kind == ANON:
            tab = self._jit_table(pid)
            if tab is None:  # no JIT symbol file: every address of its anonymous maps names alike
                return self._frame(0, "[unknown]", f"/tmp/perf-{pid}.map"), False
            sym = tab.lookup(ip)
            return self._frame(ip, sym if sym is not None else "[unknown]", f"/tmp/perf-{pid}.map"), True
        return self._frame(ip, "[unknown]", name), True

    def name_kernel(self, ips: list[int]) -> tuple[str, ...]:
        """A kernel part ([PERF_CONTEXT_KERNEL, ip...]), root first."""
        if len(ips) > self.max_stack + 1 or max(ips[1:], default=0) >= CONTEXT_MAX:
            return self.name_stack(0, 0, ips)
        kget, miss = self.kcache.get, self._kframe
        per = [kget(ip) or miss(ip) for ip in ips[1:]]
        per.reverse()
        self.named += 1
        return tuple(chain.from_iterable(per))

    def name_stack(self, pid: int, gen: int, ips: list[int]) -> tuple[str, ...]:
        """perf script's callchain for one sample (any contexts), root first (as folded)."""
        m = self.versions.get((pid, gen))
        if m is None and pid > 0:
            m = self._maps_of(pid) if pid not in self.maps else self.maps[pid]
        per: list[tuple[str, ...]] = []
        ctx = CONTEXT_USER
        n = 0
        for ip in ips:
            if ip >= CONTEXT_MAX:
                if ip in (CONTEXT_KERNEL, CONTEXT_USER, CONTEXT_HV):
                    ctx = ip
                    continue
                per = []  # a guest context: perf resets the chain
                break
            if n >= self.max_stack:
                break
            n += 1
            if ctx == CONTEXT_KERNEL:
                per.append(self._kframe(ip))
            elif ctx == CONTEXT_USER:
                per.append(self._uframe(pid, m, ip)[0])
            else:
                per.append(("[unknown]",))
        self.named += 1
        per.reverse()
        return tuple(chain.from_iterable(per))

    def _ids(self, h1, h2, u, s, umark, nr, pid, gen, kernel: bool) -> np.ndarray:
        """Part ids for part hashes: a dict lookup per distinct part; new kernel parts are named address
        by address (kallsyms, cached per address), new user parts all at once (_name_user_parts)."""
        uh = distinct(h1)
        inv = np.searchsorted(uh, h1)
        rep = np.empty(len(uh), dtype=np.int64)
        rep[inv] = np.arange(len(h1))
        parts, names = self.parts, self.part_names
        k2 = h2[rep].tolist()
        if kernel:
            keys = list(zip(uh.tolist(), k2, [0] * len(uh)))
        else:
            keys = list(zip(uh.tolist(), k2, pid[rep].tolist(), gen[rep].tolist()))
        get = parts.get
        ids = [get(k) for k in keys]
        if None in ids:
            miss = [j for j, x in enumerate(ids) if x is None]
            r = rep[miss]
            if kernel:
                a_l, n_l = (s[r] + 7).tolist(), umark[r].tolist()
            else:
                a_l, n_l = (s[r] + 7 + umark[r]).tolist(), (nr[r] - umark[r]).tolist()
            if kernel:
                for j, a, n in zip(miss, a_l, n_l):
                    ips = u[a:a + n].tolist()
                    x = ids[j] = parts[keys[j]] = len(names)
                    names.append(() if not ips else self.name_kernel(ips) if ips[0] == CONTEXT_KERNEL
                                 else self.name_stack(0, 0, ips))
            else:
                got = self._name_user_parts(u, np.array(a_l, dtype=np.int64), np.array(n_l, dtype=np.int64),
                                            pid[r], gen[r])
                pid_parts = self.pid_parts
                for j, x in zip(miss, got):
                    k = keys[j]
                    ids[j] = parts[k] = x
                    kp = pid_parts.get(k[2])
                    if kp is None:
                        pid_parts[k[2]] = [k]
                    else:
                        kp.append(k)
        return np.array(ids, dtype=np.int64)[inv]

    def _name_user_parts(self, u: np.ndarray, a: np.ndarray, n: np.ndarray, pids: np.ndarray,
                         gens: np.ndarray) -> list[int]:
        """Part ids of new user parts ([PERF_CONTEXT_USER, ip...] at u[a:a+n] of processes `pids` at map
        generations `gens`). Their addresses are resolved to frame ids in bulk, per process map
        version and per file (numpy searches in the maps and the symbol tables); parts with the same
        frames are one part, so a new address chain whose names are known (another return address in
        the same functions, a JIT address, the same program in a new process) costs no naming. Odd
        chains (other contexts, longer than the kernel's limit) are named one by one."""
        out = np.full(len(a), -1, dtype=np.int64)
        if not len(a):
            return []
        empty = n == 0
        if empty.any():
            out[empty] = self._named_part(())
        odd = ~empty & ((n - 1 > self.max_stack) | (u[np.where(empty, 0, a)] != np.uint64(CONTEXT_USER)))

        def layout(ok):
            aa, nn = a[ok] + 1, n[ok] - 1
            first = np.cumsum(nn) - nn
            owner = np.repeat(np.arange(len(ok)), nn)
            pos = np.arange(int(nn.sum()), dtype=np.int64) - first[owner]
            return nn, first, owner, pos, u[aa[owner] + pos]

        ok = np.flatnonzero(~empty & ~odd)
        nn, first, owner, pos, addrs = layout(ok)
        inner = addrs >= np.uint64(CONTEXT_MAX)
        if inner.any():  # a context marker inside the user part: named one by one
            odd[ok[distinct(owner[inner])]] = True
            ok = np.flatnonzero(~empty & ~odd)
            nn, first, owner, pos, addrs = layout(ok)
        for j in np.flatnonzero(odd).tolist():
            out[j] = self._named_part(self.name_stack(int(pids[j]), int(gens[j]), u[a[j]:a[j] + n[j]].tolist()))
        if not len(ok):
            return out.tolist()
        total = len(addrs)
        fids = np.zeros(total, dtype=np.int64)
        # resolve per (pid, gen): the addresses of all new chains of one map version at once
        pg = pids[ok].astype(np.int64) * (1 << 24) + gens[ok].astype(np.int64)
        upg = distinct(pg)
        gid = np.searchsorted(upg, pg)
        rep = np.empty(len(upg), dtype=np.int64)
        rep[gid] = ok
        if len(upg) == 1:
            fids[:] = self._resolve_user(int(pids[ok[0]]), int(gens[ok[0]]), addrs)
        elif total:
            eg = gid[owner]
            order = np.argsort(eg, kind="stable")
            se = eg[order]
            cuts = np.flatnonzero(np.concatenate(([True], se[1:] != se[:-1]))).tolist() + [len(order)]
            for c0, c1 in zip(cuts[:-1], cuts[1:]):
                idx = order[c0:c1]
                j = int(rep[se[c0]])
                fids[idx] = self._resolve_user(int(pids[j]), int(gens[j]), addrs[idx])
        # one part per distinct frame-id sequence (hashed as the address chains are)
        h1 = np.zeros(len(ok), dtype=np.uint64)
        h2 = h1.copy()
        if total:
            f = fids.astype(np.uint64)
            nz = np.flatnonzero(nn > 0)
            h1[nz] = np.add.reduceat(f * MULT[pos & 1023], first[nz])
            h2[nz] = np.add.reduceat((f ^ MIX_PID) * MULT2[pos & 1023], first[nz])
        frames, names, named = self.frames, self.part_names, self.named_parts
        fl = fids.tolist()
        res = []
        for x1, x2, ln, st in zip(h1.tolist(), h2.tolist(), nn.tolist(), first.tolist()):
            key = (x1, x2, ln)
            x = named.get(key)
            if x is None:
                seq = [frames[i] for i in fl[st:st + ln]]
                seq.reverse()
                x = named[key] = len(names)
                names.append(tuple(chain.from_iterable(seq)))
                self.named += 1
            res.append(x)
        out[ok] = res
        return out.tolist()

    def _named_part(self, names_: tuple[str, ...]) -> int:
        key = ("names", names_)
        x = self.named_parts.get(key)
        if x is None:
            x = self.named_parts[key] = len(self.part_names)
            self.part_names.append(names_)
        return x

    def _fid(self, f: tuple[str, ...]) -> int:
        x = self.frame_id.get(f)
        if x is None:
            x = self.frame_id[f] = len(self.frames)
            self.frames.append(f)
        return x

    def _resolve_user(self, pid: int, gen: int, addrs: np.ndarray) -> np.ndarray:
        """Frame ids of user addresses of process `pid` at map generation `gen` (0: in no map)."""
        out = np.zeros(len(addrs), dtype=np.int64)
        m = self.versions.get((pid, gen))
        if m is None and pid > 0:
            m = self._maps_of(pid) if pid not in self.maps else self.maps[pid]
        if m is None or not m.rows or not len(addrs):
            return out
        if len(addrs) <= 16:  # a few addresses: one by one (numpy's per-call cost is more than their work)
            fid = self._fid
            return np.array([fid(self._uframe(pid, m, a)[0]) for a in addrs.tolist()], dtype=np.int64)
        st, en, pg = m.arrays()
        i = st.searchsorted(addrs, "right").astype(np.int64) - 1
        ic = np.maximum(i, 0)
        inside = (i >= 0) & (addrs < en[ic])
        if not inside.any():
            return out
        sel = np.flatnonzero(inside)
        rows = ic[sel]
        order = np.argsort(rows, kind="stable")
        rs = rows[order]
        cuts = np.flatnonzero(np.concatenate(([True], rs[1:] != rs[:-1])))
        for c0, c1 in zip(cuts.tolist(), cuts[1:].tolist() + [len(rs)]):
            r = int(rs[c0])
            where = sel[order[c0:c1]]
            row = m.rows[r]
            kind, name = row[3], row[4]
            if kind == FILE:
                fs = self.user.file(name, self._root(pid), row[5])
                out[where] = self._table_fids(fs.table, addrs[where] - st[r] + pg[r], name)
            elif kind == VDSO:
                out[where] = self._table_fids(self.user.vdso_symbols().table, addrs[where] - st[r] + pg[r], "[vdso]")
            elif kind == ANON:
                tab = self._jit_table(pid)
                dso = f"/tmp/perf-{pid}.map"
                out[where] = self._table_fids(tab, addrs[where], dso)
            else:
                out[where] = self._fid(self._frame(0, "[unknown]", name))
        return out

    def _table_fids(self, tab, offs: np.ndarray, dso: str) -> np.ndarray:
        """Frame ids of offsets (or addresses) in a symbol table: perf's symbol, else [unknown] of dso."""
        unknown = self._fid(self._frame(0, "[unknown]", dso))
        if tab is None or not len(tab):
            return np.full(len(offs), unknown, dtype=np.int64)
        if getattr(tab, "fids_gen", None) != self.frames_gen:
            tab.fids = np.full(len(tab), -1, dtype=np.int64)
            tab.fids_gen = self.frames_gen
        j = tab.starts.searchsorted(offs, "right").astype(np.int64) - 1
        jc = np.maximum(j, 0)
        hit = (j >= 0) & ((offs < tab.ends[jc]) | (offs == tab.starts[jc]))
        res = np.where(hit, tab.fids[jc], unknown)
        todo = hit & (res < 0)
        if todo.any():
            for x in distinct(jc[todo]).tolist():
                nm = tab.name_of(int(tab.idx[x]))
                if isinstance(nm, Lazy):
                    nm = nm.resolve()
                tab.fids[x] = self._fid(self._frame(0, nm, dso))
            res = np.where(hit, tab.fids[jc], unknown)
        return res

    def forget_parts(self, pids) -> None:
        """The user parts of processes that exited (keyed per process: no later sample uses them)."""
        parts, pid_parts = self.parts, self.pid_parts
        for p in pids:
            for k in pid_parts.pop(p, ()):
                parts.pop(k, None)

    def _start_parts_over(self) -> None:
        self.parts, self.part_names, self.combos, self.named_parts = {(0, 0, 0): 0}, [()], {}, {}
        self.pid_parts = {}

    def _bound_names(self) -> None:
        """After a batch: the part, frame and cache tables start over past their bounds, and all of
        them every MAX_AGE batches."""
        self.user.expire()
        self.age += 1
        aged = self.age >= self.MAX_AGE
        if aged:
            self.age = 0
        if (aged or len(self.part_names) > self.STACK_LIMIT or len(self.combos) > self.STACK_LIMIT
                or len(self.parts) > self.PARTS_LIMIT):
            self._start_parts_over()
        if aged or len(self.fcache) + len(self.kcache) + len(self.fnames) > self.STACK_LIMIT:
            self.fcache.clear()
            self.kcache.clear()
            self.fnames.clear()
        if aged or len(self.frames) > self.STACK_LIMIT:
            self.frames, self.frame_id = [("[unknown]",)], {("[unknown]",): 0}
            self.frames_gen += 1
            self._start_parts_over()

    def close(self) -> None:
        self.user.demangle.close()
