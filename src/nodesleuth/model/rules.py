"""Kernel-log rules: data, not code. The rules file (rules/kernel-net.json) is shaped like
node-problem-detector's kernel-monitor config (same keys, so NPD can load it as is); our extra
per-rule data (class, family, driver, kind, the printk it was read from) lives under "x-nodesleuth",
which NPD ignores. A record of any log form (model/kernlog.py) matched against the rules becomes a
KernelEvent."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources

try:  # the regex parser (sre_parse before 3.11)
    from re import _constants as _sre, _parser
except ImportError:  # pragma: no cover
    import sre_constants as _sre  # type: ignore
    import sre_parse as _parser  # type: ignore

from .errors import InputError
from .timeparse import iso
from .kernlog import Record
from .records import KernelEvent


PREFIX = re.compile(r"^(?P<driver>[\w.-]+) (?P<bus>[^\s:]+(?::[^\s:]+)*?)(?: (?P<ifname>[^\s:]+))?: ")


@dataclass(frozen=True)
class Rule:
    reason: str
    type: str
    regex: re.Pattern
    driver: str
    kind: str  # tx_timeout | starvation | reset_start | reset | watchdog | missing_tx | ...
    severity: str
    reset_reason: str | None
    cls: str = "nic"  # nic | lockup | ...: which incident model the rule feeds
    family: str = ""  # driver family (ena, mlx5, ...) or lockup kind; empty = the driver the line names
    follow: tuple = ()  # patterns for the report's next lines (an RCU stall names its CPUs there)
    follow_lines: int = 0
    literal: tuple = ()  # explicit "x-nodesleuth.literal": strings one of which every matching line contains
    title: str = ""  # what a finding calls one such line ("soft lockup"); lockup rules
    remedy: str = ""  # what a finding of such lines tells a person to do; lockup rules


def when(e: KernelEvent) -> str:
    """The event's time as evidence: wall time and how it was derived, or why there is none."""
    up = f"uptime +{e.usec / 1e6:.3f} s" if e.usec is not None else ""
    if e.time is None:
        return f"{up}, wall time unknown (no boot time for this log: give --boot-time)" if up else "time unknown"
    how = {"wall": "as logged", "boot": "boot time + uptime", "read": "when read; the line has no time",
           "minute": "to the minute: dmesg --reltime prints hh:mm and deltas; year assumed"}.get(e.clock, e.clock)
    return f"{iso(e.time)} ({how}{'; ' + up if up else ''})"


def load_rules(path: str | None = None) -> "RuleSet":
    """The rules of a file (default: the packaged rules/kernel-net.json), with their prefilter. Patterns compile with
    re.ASCII: \\d, \\w, \\s and \\b mean what they mean in Go's regexp, so the file means the same to NPD."""
    if path is None:
        ref = resources.files("nodesleuth").joinpath("rules/kernel-net.json")
        return RuleSet(_ruleset(ref.read_text(), "nodesleuth/rules/kernel-net.json"))
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise InputError(path, e.strerror or str(e)) from None
    return RuleSet(_ruleset(text, path))


@functools.lru_cache(maxsize=4)
def _ruleset(text: str, path: str) -> "RuleSet":
    """Parsed, compiled and indexed once per rules text; load_rules() hands out copies sharing the index."""
    return RuleSet(_load_text(text, path))


def _load_text(text: str, path: str) -> tuple[Rule, ...]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(path, f"invalid JSON: {e}") from None
    rules = []
    for i, r in enumerate(doc.get("rules", [])):
        x = r.get("x-nodesleuth", {})
        try:
            rx = re.compile(r["pattern"], re.ASCII)
        except (KeyError, re.error) as e:
            raise InputError(path, f"rule {i} ({r.get('reason')}): bad pattern: {e}") from None
        fol = x.get("follow") or {}
        try:
            follow = tuple(re.compile(p, re.ASCII) for p in fol.get("patterns", []))
        except re.error as e:
            raise InputError(path, f"rule {i} ({r.get('reason')}): bad follow pattern: {e}") from None
        lit = x.get("literal") or ()
        lit = (lit,) if isinstance(lit, str) else tuple(lit)
        rules.append(Rule(r.get("reason", f"rule{i}"), r.get("type", "temporary"), rx, x.get("driver", ""),
                          x.get("kind", "other"), x.get("severity", "warning"), x.get("reset_reason"),
                          x.get("class", "nic"), x.get("family", ""), follow, int(fol.get("lines", 0)), lit,
                          x.get("title", ""), x.get("remedy", "")))
    return tuple(rules)


# ---- prefilter: which rules can match a line, from one scan of its words

_TOKEN = re.compile(r"\w+", re.ASCII)
# words so common in kernel logs that a rule keyed on them would be tried on most lines
_COMMON = frozenset("""the a an of on in to for is are was be has have it and or with by at from not no
    timed out timeout time reset resetting failed error device queue tx rx tx_timeout detected cpu eth0 link up down
    driver info warning netdev pci port""".split())


def _nonword(item) -> bool | None:
    """True if this one parsed item always matches one non-word character; False if it may match a word
    character; None if it is not a single-character item."""
    op, av = item
    if op == _sre.LITERAL:
        return not _TOKEN.fullmatch(chr(av))
    if op == _sre.NOT_LITERAL:
        return False
    if op == _sre.IN:
        neg = bool(av) and av[0][0] == _sre.NEGATE
        members = av[1:] if neg else av
        if neg:  # [^\S...] = whitespace minus some: never a word character
            return any(m == (_sre.CATEGORY, _sre.CATEGORY_NOT_SPACE) for m in members)
        for m in members:
            if m[0] == _sre.LITERAL and not _TOKEN.fullmatch(chr(m[1])):
                continue
            if m == (_sre.CATEGORY, _sre.CATEGORY_SPACE):
                continue
            return False
        return True
    if op == _sre.ANY:
        return False
    return None


def _bounded(seq, j: int, step: int, outside: bool = False) -> bool:
    """Whether position j of seq (looking in direction step) guarantees a non-word character or a boundary next
    to a literal run: an anchor, a non-word character, or a run of optional non-word characters then one.
    Past the end of seq, `outside` says what the enclosing sequence guarantees there."""
    while 0 <= j < len(seq):
        op, av = seq[j]
        if op == _sre.AT:
            return True
        nw = _nonword(seq[j])
        if nw is not None:
            return nw
        if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT) and len(av[2]) == 1 and _nonword(av[2][0]):
            if av[0] >= 1:
                return True
            j += step
            continue
        return False
    return outside


def _requirements(seq, left_out: bool = False, right_out: bool = False) -> list[frozenset]:
    """Requirements of a parsed sequence: each a set of alternatives (("t", word) or ("s", substring)), one of
    which every string the sequence matches contains."""
    out = []
    i, n = 0, len(seq)
    while i < n:
        op, av = seq[i]
        if op == _sre.LITERAL:
            j = i
            while j < n and seq[j][0] == _sre.LITERAL:
                j += 1
            run = "".join(chr(c) for _, c in seq[i:j])
            left, right = _bounded(seq, i - 1, -1, left_out), _bounded(seq, j, 1, right_out)
            for m in _TOKEN.finditer(run):
                if (m.start() > 0 or left) and (m.end() < len(run) or right):
                    out.append(frozenset({("t", m.group())}))
            if len(run.strip()) >= 4:
                out.append(frozenset({("s", run)}))
            i = j
            continue
        if op == _sre.SUBPATTERN:
            if av[1] & re.IGNORECASE:
                return []
            out += _requirements(av[3], _bounded(seq, i - 1, -1, left_out), _bounded(seq, i + 1, 1, right_out))
        elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT) and av[0] >= 1:
            out += _requirements(av[2])
        elif op == _sre.BRANCH:
            alts = [_requirements(b) for b in av[1]]
            if all(alts):
                out.append(frozenset().union(*(min(a, key=_cost) for a in alts)))
        i += 1
    return out


def _cost(req: frozenset) -> float:
    """How often a line is expected to carry one of the alternatives (lower = a sharper filter)."""
    c = 0.0
    for kind, w in req:
        if kind == "t":
            c += 50 if w.lower() in _COMMON else 10 if len(w) <= 3 or w.isdigit() else 1
        else:
            c += 2 + 20 / len(w)  # a substring test costs more than a word lookup
    return c


def requirement(rule: Rule) -> frozenset | None:
    """The alternatives one of which every line the rule matches contains; None = try it on every line."""
    if rule.literal:
        return frozenset(("s", x) for x in rule.literal)
    if rule.regex.flags & re.IGNORECASE:
        return None
    reqs = _requirements(_parser.parse(rule.regex.pattern, rule.regex.flags))
    return min(reqs, key=_cost) if reqs else None


class RuleSet(list):
    """The rules in file order, with an index that narrows which of them can match a line: every rule's pattern
    requires a word or a substring (derived from the parsed pattern, or the rule's explicit literal); one word scan
    of the line finds the rules whose requirement it meets, and only those run, in file order. The first matching
    rule is the one the plain loop over all rules would find (tests/test_rules.py checks it on every line)."""

    def __init__(self, rules=()):
        super().__init__(rules)
        if isinstance(rules, RuleSet):  # a copy: same rules, same index
            self.always, self.words, self.subs, self._keys = rules.always, rules.words, rules.subs, rules._keys
            return
        words: dict[str, list[int]] = {}
        subs: dict[str, list[int]] = {}
        self.always: list[int] = []
        for i, r in enumerate(self):
            req = requirement(r)
            if req is None:
                self.always.append(i)
                continue
            for kind, w in req:
                (words if kind == "t" else subs).setdefault(w, []).append(i)
        self.words = {w: tuple(ix) for w, ix in words.items()}
        self.subs = tuple((s, tuple(ix)) for s, ix in subs.items())
        self._keys = frozenset(self.words)

    def candidates(self, message: str) -> list[int]:
        c = set(self.always)
        for w in self._keys.intersection(_TOKEN.findall(message)):
            c.update(self.words[w])
        for s, ix in self.subs:
            if s in message:
                c.update(ix)
        return sorted(c)

    def first(self, message: str) -> tuple[Rule, re.Match] | None:
        for i in self.candidates(message):
            m = self[i].regex.match(message)
            if m:
                return self[i], m
        return None


def first_naive(rules, message: str) -> tuple[Rule, re.Match] | None:
    """Every rule in turn: what RuleSet.first must always agree with."""
    for r in rules:
        m = r.regex.match(message)
        if m:
            return r, m
    return None


@functools.lru_cache(maxsize=8)
def _reasons(rules_path: str | None, cls: str) -> frozenset[str]:
    return frozenset(r.reason for r in load_rules(rules_path) if r.cls == cls)


def nic_reasons(rules_path: str | None = None) -> frozenset[str]:
    """Rule reasons whose class is "nic" in the rules file: the one list of NIC trouble."""
    return _reasons(rules_path, "nic")


def is_nic(e, rules_path: str | None = None) -> bool:
    """A NIC reset/timeout line. Events recorded before rules had classes are looked up by reason."""
    cls = getattr(e, "category", "")
    return cls == "nic" if cls else e.reason in nic_reasons(rules_path)


def match(rec: Record, rules: list[Rule], boot_wall: float | None, naive: bool = False) -> KernelEvent | None:
    """The first rule matching the record, as an event; its wall time from the record's own stamp, else
    boot_wall + uptime, else None (clock "none"). A RuleSet (load_rules) tries only the rules its prefilter
    allows; naive=True (or a plain list) tries every rule in turn."""
    hit = rules.first(rec.message) if isinstance(rules, RuleSet) and not naive else first_naive(rules, rec.message)
    if hit is None:
        return None
    r, m = hit
    fields = {}
    for k, v in m.groupdict().items():  # old/new format alternatives share one public name
        if v is not None:
            fields.setdefault(re.sub(r"_(?:new|old|v\d+)$", "", k), v)
    pm = PREFIX.match(rec.message)
    driver = fields.pop("driver", None) or r.driver or (pm.group("driver") if pm else "")
    ifname = fields.pop("ifname", None) or (pm.group("ifname") if pm and pm.group("ifname") else "")
    if pm and not fields.get("bus"):
        fields["bus"] = pm.group("bus")
    reset_reason = r.reset_reason
    if r.reason == "ENATxQueuePaused":
        # the driver's own decision: napi scheduled but not run past the threshold = starvation
        napi = int(fields.get("napi_usec", 0))
        starving = fields.get("napi_scheduled") == "1" and napi > int(fields.get("threshold_usec", 0))
        reset_reason = "SUSPECTED_POLL_STARVATION" if starving else "OS_NETDEV_WD"
    if rec.wall is not None:
        t, clock = rec.wall, "wall"
    elif rec.usec is not None and boot_wall is not None:
        t, clock = boot_wall + rec.usec / 1e6, "boot"
    else:
        t, clock = None, "none"
    family = r.family or {"mlx5_core": "mlx5", "r8125": "r8169", "r8168": "r8169", "r8126": "r8169",
                          "": "i40e"}.get(driver, driver)
    return KernelEvent(seq=rec.seq, time=t, usec=rec.usec, reason=r.reason, kind=r.kind, severity=r.severity,
                       driver=driver, ifname=ifname, message=rec.message, reset_reason=reset_reason, fields=fields,
                       category=r.cls, family=family, clock=clock)


# ---- a lockup's stack trace tied to the NIC driver whose code it runs

# one stack frame: 'func+0xoff/0xlen [module]' (x86 frames, 'RIP: 0010:', arm64 'pc : '/'lr : ', powerpc 'NIP [..] ',
# 4.x '[<ffffffff..>] '); '? ' marks a frame the unwinder could not vouch for
FRAME = re.compile(r"(?:^|[\s\]:>(])(?P<unrel>\? )?(?P<fn>[A-Za-z_$][\w.$]*)\+0x[0-9a-fA-F]+/0x[0-9a-fA-F]+"
                   r"(?: \[(?P<mod>[\w-]+)\])?")
# the kernel's own NAPI and transmit entry points: a driver frame under one of them is the driver's NAPI/xmit code
NET_CONTEXT = frozenset({"__napi_poll", "napi_poll", "net_rx_action", "napi_busy_loop", "busy_poll_stop",
                         "napi_threaded_poll", "napi_threaded_poll_loop", "netpoll_poll_dev", "poll_one_napi",
                         "dev_hard_start_xmit", "sch_direct_xmit", "__dev_queue_xmit", "dev_queue_xmit", "xmit_one",
                         "netpoll_start_xmit", "__netdev_start_xmit", "netdev_start_xmit", "__dev_direct_xmit",
                         "napi_complete_done", "__napi_schedule", "napi_gro_receive"})
# lines that end a report: the next report, or the trace's end marker
REPORT_END = re.compile(r"---\[ end (?:trace|Kernel panic)|^\s*(?:\S+ )?kernel: ---\[ end")


@functools.lru_cache(maxsize=1)
def nic_frames() -> dict:
    """rules/nic-frames.json: which module each NAPI poll / ndo_start_xmit function (and the driver functions they
    call) belongs to, and each driver's function-name prefixes; read from the drivers' sources."""
    return json.loads(resources.files("nodesleuth").joinpath("rules/nic-frames.json").read_text())


def _modules_of(fn: str, mod: str | None, context: bool) -> tuple[set, str] | None:
    """The NIC modules a frame belongs to and how that is known; None if it is not NIC driver code (or not
    provably so: a driver helper needs the kernel's NAPI/xmit entry under it)."""
    fm = nic_frames()
    mod = mod.replace("-", "_") if mod else None
    f = fm["functions"].get(fn)
    if f:
        mods = set(f["modules"])
        if mod and mod not in mods:
            return None  # another module's function of the same name
        return ({mod} if mod else mods), f["role"]
    if not context:
        return None
    c = fm["calls"].get(fn)
    if c and (not mod or mod in c["modules"]):
        return ({mod} if mod else set(c["modules"])), "called by " + "/".join(c["called_by"][:2])
    if mod and mod in fm["modules"]:
        return {mod}, "driver code"
    if mod and re.search(r"_(?:start_xmit|xmit_frame|napi_poll|poll)$", fn):
        return {mod}, "xmit" if "xmit" in fn else "napi_poll"  # an out-of-tree driver's own entry point
    for p, mods in fm["prefixes"].items():
        if fn.startswith(p):
            if mod and mod not in mods:
                return None
            return ({mod} if mod else set(mods)), "driver code"
    return None


def tie_stack(lines: list[str]) -> dict | None:
    """Whether a lockup/stall report (its header and the lines after it) shows NIC driver code running: a driver's
    NAPI poll or transmit function, or driver code under the kernel's NAPI/transmit entry points. Returns the
    fields to add to the event (nic_driver, nic_family, nic_frames, nic_how, nic_device/nic_ifname when a line of
    the report names the device) or None. Driver names come from nic-frames.json (read from driver sources)."""
    frames = []
    for ln in lines:
        for m in FRAME.finditer(ln):
            frames.append((m.group("fn").split(".")[0], m.group("mod"), bool(m.group("unrel"))))
    if not frames:
        return None
    context = any(fn in NET_CONTEXT for fn, _, _ in frames)
    votes: dict[str, int] = {}
    hits: list[tuple[str, set, str]] = []
    for reliable_pass in (True, False):
        for fn, mod, unrel in frames:
            if unrel == reliable_pass:
                continue
            got = _modules_of(fn, mod, context)
            if got is None:
                continue
            mods, how = got
            hits.append((fn, mods, how))
            for m in mods:
                votes[m] = votes.get(m, 0) + (2 if not unrel else 1) * (2 if how in ("napi_poll", "xmit") else 1)
        if hits:
            break  # frames the unwinder vouches for decide; the '? ' ones only when there are none
    if not votes:
        return None
    top = max(votes.values())
    best = sorted(m for m, v in votes.items() if v == top)
    fm = nic_frames()
    names = []
    for fn, mods, how in hits:
        if mods & set(best) and fn not in names:
            names.append(fn)
    how = next((h for _, mods, h in hits if mods & set(best) and h in ("napi_poll", "xmit")),
               next(h for _, mods, h in hits if mods & set(best)))
    out = {"nic_driver": "|".join(best), "nic_family": "|".join(fm["modules"].get(m, {}).get("family", m) for m in best),
           "nic_frames": ",".join(names[:6]), "nic_how": how}
    for ln in lines:  # a line of the report naming the device ('mlx5_core 0000:3b:00.0 ens1f0np0: ...')
        pm = PREFIX.search(ln)
        if pm and pm.group("driver").replace("-", "_") in best:
            out["nic_device"] = pm.group("bus")
            if pm.group("ifname"):
                out["nic_ifname"] = pm.group("ifname")
            break
    return out
