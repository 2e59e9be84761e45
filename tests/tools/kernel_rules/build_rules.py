"""Build src/nodesleuth/rules/kernel-net.json (issue 28) from
  * today's 35 rules (git show found:src/nodesleuth/rules/kernel-net.json -> kernel-net.orig.json), kept first and
    corrected where part A found them wrong,
  * /work/scratch/drivers/part-A.json and part-B.json (printk formats of NIC drivers read from kernel sources),
  * /work/scratch/lockups/lockups.json (lockup / stall wordings).
Entries whose lines an existing rule already matches are folded into that rule's "formats"; the others are grouped
per (family, kind, first content words) into one rule each. Every pattern is rewritten to be NPD-safe (npdsafe.py).
Writes the rules file and prints a summary."""

from __future__ import annotations

import collections
import json
import re
import sys

sys.path.insert(0, "/work/scratch/kernlog")
from npdsafe import npd_safe  # noqa: E402

WT = "/work/wt/kernlog"
A = json.load(open("/work/scratch/drivers/part-A.json"))
B = json.load(open("/work/scratch/drivers/part-B.json"))
L = json.load(open("/work/scratch/lockups/lockups.json"))
ORIG = json.load(open("/work/scratch/kernlog/kernel-net.orig.json"))
# amzn-drivers entries whose function the part-A extractor missed: found in the cited commit (amznfunc.py)
AMZN = json.load(open("/work/scratch/kernlog/amzn_funcs.json"))
for _e in A:
    if not _e["function"] and _e["format"] in AMZN:
        _e["function"], _line = AMZN[_e["format"]]
        for _s in _e["sources"]:
            _s.setdefault("line", _line)
        _e["sources"][0]["function"] = _e["function"]

FAM = {"ena": "ENA", "mlx5": "Mlx5", "mlx4": "Mlx4", "bnxt_en": "Bnxt", "netdev_watchdog": "NetdevWatchdog",
       "xen_netfront": "XenNetfront", "octeontx2": "OcteonTx2", "i40e": "I40e", "iavf": "Iavf", "ice": "Ice",
       "igb": "Igb", "igc": "Igc", "igbvf": "Igbvf", "ixgbe": "Ixgbe", "ixgbevf": "Ixgbevf", "ixgb": "Ixgb",
       "e1000": "E1000", "e1000e": "E1000e", "e100": "E100", "fm10k": "Fm10k", "idpf": "Idpf", "bnx2": "Bnx2",
       "bnx2x": "Bnx2x", "tg3": "Tg3", "b44": "B44", "r8169": "R8169", "r8152": "R8152", "8139cp": "Rtl8139cp",
       "virtio_net": "VirtioNet", "vmxnet3": "Vmxnet3", "gve": "Gve", "mana": "Mana", "hns3": "Hns3",
       "qede": "Qede", "be2net": "Be2net", "cxgb4": "Cxgb4", "cxgb3": "Cxgb3", "sfc": "Sfc", "ibmvnic": "Ibmvnic",
       "stmmac": "Stmmac", "mtk_eth_soc": "MtkEth", "8390": "Ne8390", "hinic": "Hinic", "nfp": "Nfp",
       "qlcnic": "Qlcnic", "netxen": "Netxen", "liquidio": "LiquidIO", "ionic": "Ionic", "enic": "Enic"}
STOP = {"a", "an", "the", "of", "on", "in", "to", "for", "is", "are", "was", "be", "has", "have", "it", "its",
        "and", "or", "with", "by", "at", "from", "this", "that", "will", "s", "d", "u", "x", "lu", "ld", "llu",
        "lld", "p", "pm", "pe", "ps", "pbl", "0x", "08x", "02x", "04x", "4x", "8x", "x2", "hhx"}
LEAD = {"detected", "found", "got"}
ENA_RR = [("keep alive", "KEEP_ALIVE_TO"), ("admin queue", "ADMIN_TO"), ("msix", "MISS_INTERRUPT"),
          ("lost tx", "MISS_TX_CMPL"), ("missed tx", "MISS_TX_CMPL"), ("tx hasn't completed", "MISS_TX_CMPL"),
          ("tx that wasn't completed", "MISS_TX_CMPL"), ("unhealthy state", "DEVICE_REQUEST"),
          ("transmit time out", "OS_NETDEV_WD"), ("tx timeout on invalid queue", "OS_NETDEV_WD"),
          ("tx queue is stuck", "MISS_TX_CMPL")]


def camel_family(f: str) -> str:
    return FAM.get(f) or "".join(w[:1].upper() + w[1:] for w in re.split(r"[-_ ]+", f) if w)


def text_of(fmt: str) -> str:
    t = fmt.split("\n")[0]
    t = re.sub(r"^\{KERN_\w+\}", "", t)
    t = re.sub(r"^%s:%d:\(pid %d\): ", "", t)
    t = re.sub(r"^\[%s:%d\(%s\)\]", "", t)
    t = re.sub(r"%[-+ #0]*\*?\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t|L)?(?:p[A-Za-z]{1,3}|[diouxXcsfeEgGaAn])|%%", " ", t)
    t = re.sub(r"\b0x\b", " ", t)
    return t


def words(fmt: str) -> list[str]:
    ws = [w for w in re.findall(r"[A-Za-z][A-Za-z0-9]*", text_of(fmt).replace("'", "")) if w.lower() not in STOP]
    return ws


def camel_words(ws: list[str], n: int, drop: tuple = ()) -> str:
    while ws and len(ws) > 2 and (ws[0].lower() in LEAD or any(ws[0].lower().startswith(d) for d in drop if d)):
        ws = ws[1:]
    out = []
    for w in ws[:n]:
        out.append(w if (w.isupper() and len(w) <= 5) or any(ch.isdigit() for ch in w) else w[:1].upper() + w[1:].lower())
    return "".join(out)


def strip_lead(p: str) -> str:
    return p[2:] if p.startswith(".*") else p


GROUP = re.compile(r"\(\?P<(\w+)>")


def merge_patterns(pats: list[str]) -> str:
    """One pattern matching what any of pats matches (each keeps its own leading .* or ^); group names that repeat
    in later alternatives get a _vN suffix (match() folds _vN back into the public name)."""
    pats = list(dict.fromkeys(pats))
    if len(pats) == 1:
        return pats[0]
    seen: set[str] = set()
    alts = []
    for k, p in enumerate(pats, 1):
        names = GROUP.findall(p)
        ren = {}
        for nm in names:
            if nm in seen:
                ren[nm] = f"{nm}_v{k}"
        p2 = GROUP.sub(lambda m: f"(?P<{ren.get(m.group(1), m.group(1))}>", p)
        seen.update(ren.get(nm, nm) for nm in names)
        alts.append(p2)
    return "(?:" + "|".join(alts) + ")"


def versions_of(e) -> list[str]:
    v = e["versions"]
    return v if isinstance(v, list) else [v]


def ref(s) -> str:
    if isinstance(s, str):
        return s
    if "tree" in s:
        t = s["tree"].replace("debian linux-source-", "Debian linux-source-")
        return f"{t} {s['path']}:{s.get('line', '?')}"
    return f"{s.get('repo')}@{(s.get('commit') or '')[:12]} {s.get('path')}:{s.get('line', '?')}" + (
        f" ({s['note']})" if s.get("note") else "")


def fmt_entry(e, part: str) -> dict:
    return {"format": e["format"], "call": e.get("call", ""), "file": e["path"], "function": e["function"],
            "versions": versions_of(e), "refs": [ref(s) for s in e["sources"]], "from": part}


# ---------------------------------------------------------------- today's rules, corrected

def orig_rules() -> list[dict]:
    out = []
    for r in ORIG["rules"]:
        r = json.loads(json.dumps(r))
        x = r["x-nodesleuth"]
        if r["reason"] == "IxgbeTxHang":  # part A: ixgbevf prints 'ixgbevf: Detected Tx Unit Hang' (pr_err, no bus/if)
            r["pattern"] = r["pattern"].replace(r"(?P<driver>ixgbe|ixgbevf)", r"(?P<driver>ixgbe)")
            x["source"] += "; ixgbevf's own hang line has no bus/ifname: rule IxgbevfTxUnitHang"
        if r["reason"] == "NetdevWatchdog":  # part A: four wordings; the prefix-less ones must start the message
            nw = [e for e in A if e["family"] == "netdev_watchdog"]
            cpu = [e for e in nw if "CPU: %d" in e["format"]][0]["pattern"]
            old = [e for e in nw if e["format"].startswith("NETDEV WATCHDOG: %s: transmit timed out")][0]["pattern"]
            q = [e for e in nw if e["format"] == "NETDEV WATCHDOG: %s (%s): transmit queue %u timed out\n"][0]
            # the two WARN_ONCE wordings (with and without ' %u ms') as one alternative
            qp = q["pattern"].replace(r"timed out\s*$", r"timed out(?: (?P<ms>\d+) ms)?\s*$")
            pats = [p.replace('(?:\\]|kernel:|>|")', '(?:\\]|kernel:|>|"|\\|)') for p in (qp, old)]
            assert all("|\\|)" in p for p in pats), pats
            r["pattern"] = merge_patterns([cpu, pats[0], pats[1].replace("(?P<ifname>", "(?P<ifname_old>")])
            x["source"] = ("net/sched/sch_generic.c dev_watchdog(): <=2.6.30 'NETDEV WATCHDOG: %s: transmit timed out'; "
                           "2.6.31-6.3 WARN_ONCE 'NETDEV WATCHDOG: %s (%s): transmit queue %u timed out' (' %u ms' "
                           "6.4-6.6); 6.7+ and 6.1.y/6.6.y netdev_crit '<driver> <bus> <if>: NETDEV WATCHDOG: CPU: %d: "
                           "transmit queue %u timed out %u ms'. The prefix-less wordings must start the message "
                           "(ESXi vmkernel 'LinNet: netdev_watchdog: NETDEV WATCHDOG:' lines are not Linux)")
        if r["reason"] == "ENATriggerReset":  # FreeBSD's ena(4) prints 'ena0: Trigger reset is on' too
            r["pattern"] = r".*\bena\b.*Trigger reset is on.*"
            x["source"] += "; the line must name the Linux driver 'ena' (FreeBSD's 'ena0: Trigger reset is on' is not Linux)"
        if r["reason"] == "R8169ConditionTimeout":  # part A: register-access polls are look-alikes
            e = [e for e in A if e["family"] == "r8169" and e["format"].startswith("%s ==")][0]
            r["pattern"] = e["pattern"]
            x["source"] += ("; only the reset/TX-stop conditions (chipcmd, txcfg_empty, rxtx_empty(_2), npq, "
                            "link_list_ready, ocp_tx, mac_ocp_e00e): register-access polls (eriar, ephyar, phyar, "
                            "ocp_gphy, csiar, ...) are not a hang")
        x["formats"] = []
        out.append(r)
    return out


def compile_all(rules):
    return [(r, re.compile(npd_safe(r["pattern"]), re.ASCII)) for r in rules]


def first(rules_c, line):
    for r, rx in rules_c:
        if rx.match(line):
            return r
    return None


def fam_of(r) -> str:
    return r["x-nodesleuth"].get("family", "")


def entry_lines(e) -> list[str]:
    return list(e["generated"]) + [x["line"] for x in e["real"]]


# ---------------------------------------------------------------- driver entries

NAMES = {("mlx5", "start"): "Mlx5EnterErrorState", ("hibmcge", ""): "HibmcgeTxTimeoutDump",
         ("ibm_emac", ":"): "IbmEmacTimeout"}
FIX_PAT = {("mlx5", "%s:%d:(pid %d): start\n"): (r"(?P<func>\w+)", r"(?P<func>mlx5_enter_error_state)")}
FIX_GEN = {"ixgbevf: Detected Tx Unit Hangeth0": ["ixgbevf: Detected Tx Unit Hang", "ixgbevf: Detected Tx Unit Hang XDP"]}


def build():
    rules = orig_rules()
    by_reason = {r["reason"]: r for r in rules}
    rc = compile_all(rules)
    fold, new = [], []
    for part, entries in (("part-A", A), ("part-B", B)):
        for e in entries:
            e["generated"] = [g for x in e["generated"] for g in FIX_GEN.get(x, [x])]
            e["_part"] = part
            fx = FIX_PAT.get((e["family"], e["format"]))
            if fx:
                e["pattern"] = e["pattern"].replace(*fx)
            lines = entry_lines(e)
            hits = [first(rc, ln) for ln in lines]
            if e["family"] == "netdev_watchdog":
                fold.append((e, by_reason["NetdevWatchdog"]))
            elif all(h is not None and fam_of(h) in (e["family"], "") for h in hits) and len({h["reason"] for h in hits}) == 1:
                fold.append((e, hits[0]))
            else:
                if any(h is not None for h in hits):
                    print("PARTIAL", e["family"], repr(e["format"][:60]), [h and h["reason"] for h in hits], file=sys.stderr)
                new.append(e)
    for e, r in fold:
        r["x-nodesleuth"]["formats"].append(fmt_entry(e, e["_part"]))
    groups = collections.OrderedDict()
    for e in new:
        ws = words(e["format"])
        key = (e["family"], e["kind"], tuple(w.lower() for w in ws[:3]))
        groups.setdefault(key, []).append(e)
    # groups of one family and kind whose patterns match each other's lines are one rule (NPD would raise both)
    keys = list(groups)
    merged = True
    while merged:
        merged = False
        for i, ka in enumerate(keys):
            for kb in keys[i + 1:]:
                if ka[:2] != kb[:2]:
                    continue
                pa = re.compile(npd_safe(merge_patterns([e["pattern"] for e in groups[ka]])), re.ASCII)
                pb = re.compile(npd_safe(merge_patterns([e["pattern"] for e in groups[kb]])), re.ASCII)
                if any(pa.match(ln) for e in groups[kb] for ln in entry_lines(e)) or \
                        any(pb.match(ln) for e in groups[ka] for ln in entry_lines(e)):
                    groups[ka] += groups.pop(kb)
                    keys.remove(kb)
                    merged = True
                    break
            if merged:
                break
    names = set(by_reason)
    out_new = []
    for (fam, kind, _), es in groups.items():
        rep = min(es, key=lambda e: len(text_of(e["format"])))
        drop = tuple({fam.lower().replace("_en", ""), *(d.lower().split("-")[0] for e in es for d in e["driver"].split("|"))})
        base = NAMES.get((fam, text_of(rep["format"]).strip()[:40])) or camel_family(fam) + camel_words(words(rep["format"]), 4, drop)
        name = base
        if name in names:
            name = base + camel_words(kind.split("_"), 2)
        k = 2
        while name in names:
            name = f"{base}{k}"
            k += 1
        names.add(name)
        drivers = []
        for e in es:
            for d in e["driver"].split("|"):
                if d not in drivers:
                    drivers.append(d)
        sev = "critical" if any(e["severity"] == "critical" for e in es) else "warning"
        x = {"class": "nic", "family": fam, "driver": drivers[0] if len(drivers) == 1 else "", "kind": kind,
             "severity": sev}
        if fam == "ena":
            t = " ".join(text_of(e["format"]).lower() for e in es)
            for kw, rr in ENA_RR:
                if kw in t:
                    x["reset_reason"] = rr
                    break
        funcs = []
        for e in es:
            f = f"{e['path']} {e['function']}()"
            if f not in funcs:
                funcs.append(f)
        vers = sorted({v for e in es for v in versions_of(e)}, key=vkey)
        x["source"] = "; ".join(funcs) + f" ({', '.join(vers)})"
        x["formats"] = [fmt_entry(e, e["_part"]) for e in es]
        notes = [e["notes"] for e in es if e.get("notes")]
        if notes:
            x["notes"] = " | ".join(dict.fromkeys(notes))
        pat = merge_patterns([e["pattern"] for e in es])
        out_new.append({"type": "temporary", "reason": name, "pattern": pat, "x-nodesleuth": x})
    return rules, out_new, new, fold


def vkey(v: str):
    m = re.match(r"(\d+)\.(\d+)", v)
    return (0, int(m.group(1)), int(m.group(2)), v) if m else (1, 0, 0, v)


if __name__ == "__main__" and len(sys.argv) == 1:
    rules, out_new, new, fold = build()
    print(len(rules), "kept;", len(fold), "entries folded;", len(new), "entries ->", len(out_new), "new rules",
          file=sys.stderr)
    for r in out_new:
        print(r["reason"].ljust(40), r["x-nodesleuth"]["kind"].ljust(12), len(r["x-nodesleuth"]["formats"]),
              file=sys.stderr)


# ---------------------------------------------------------------- lockups

LK = {e["id"]: e for e in L}


def lk_formats(*ids) -> list[dict]:
    out = []
    for i in ids:
        e = LK[i]
        out.append({"format": e["format"], "call": e["call"], "file": e["path"], "function": e["function"],
                    "versions": [e["versions"]] if isinstance(e["versions"], str) else e["versions"],
                    "refs": e["sources"], "from": "lockups"})
    return out


PANIC = r"Kernel panic - not syncing: (?P<panic>softlockup: hung tasks|Hard LOCKUP|RCU Stall|hung_task: blocked tasks|workqueue: .*)"


def lockup_rules(rules_by_reason: dict) -> list[dict]:
    soft = rules_by_reason["SoftLockup"]
    soft["x-nodesleuth"]["formats"] = lk_formats("soft_lockup")
    soft["x-nodesleuth"]["follow"] = {
        "lines": 12,
        "why": "6.12+ (CONFIG_SOFTLOCKUP_DETECTOR_INTR_STORM) prints the locked CPU's utilization and its most "
               "frequent hard IRQs right after the header (kernel/watchdog.c print_cpustat(), print_irq_counts()); "
               "a panic follows with softlockup_panic=1",
        "patterns": [LK["soft_lockup_cpustat"]["pattern"],
                     r"#\d+:\s+(?P<system_pct>\d+)% system,\s+(?P<softirq_pct>\d+)% softirq,\s+(?P<hardirq_pct>\d+)% hardirq",
                     r"CPU#\d+ Detect HardIRQ Time exceeds (?P<hardirq_exceeds_pct>\d+)%",
                     r"#1: (?P<top_irq_count>\d+)\s+irq#(?P<top_irq>\d+)",
                     PANIC]}
    soft["x-nodesleuth"]["formats"] += lk_formats("soft_lockup_cpustat", "soft_lockup_irqstorm", "soft_lockup_panic")
    hard = rules_by_reason["HardLockup"]
    hard["x-nodesleuth"]["formats"] = lk_formats("hard_lockup", "sparc_nmi_lockup", "hard_lockup_panic")
    hard["x-nodesleuth"]["follow"] = {"lines": 60, "why": "a panic follows with hardlockup_panic=1",
                                      "patterns": [PANIC]}
    rcu = rules_by_reason["RcuStall"]
    rcu["pattern"] = (
        r".*INFO: (?P<flavor>rcu_\w+|rcu|[\w-]+) (?:self-detected stall on CPU|detected (?P<expedited>expedited )?"
        r"stalls on CPUs/tasks:|detected stall on CPU (?P<cpu>\d+) \(t=(?P<jiffies_old>\d+) jiffies\)|detected "
        r"(?:stall|expedited stalls), but suppressed full report due to a stuck (?P<csd>CSD-lock))"
        r"(?:.*\bt=(?P<jiffies>\d+) jiffies)?.*")
    rcu["x-nodesleuth"]["source"] += ("; 2.6.3x-3.x kernel/rcutree.c 'INFO: %s detected stall on CPU %d (t=%lu "
                                      "jiffies)'; 6.12+ '... detected stall, but suppressed full report due to a "
                                      "stuck CSD-lock.'")
    fol = rcu["x-nodesleuth"]["follow"]
    fol["lines"] = 60
    fol["patterns"] += [r"(?P<kthread>rcu_\w+) kthread starved for (?P<kthread_starved_jiffies>\d+) jiffies!(?:.*->cpu=(?P<kthread_cpu>\d+))?",
                        r"(?P<timer_flavor>rcu_\w+) kthread timer wakeup didn't happen for (?P<timer_jiffies>\d+) jiffies",
                        PANIC]
    rcu["x-nodesleuth"]["formats"] = lk_formats("rcu_self_detected", "rcu_old_self_detected", "rcu_other_cpu",
                                                "rcu_expedited", "rcu_csd_suppressed", "rcu_cpu_detail", "rcu_t_line",
                                                "rcu_detected_by", "rcu_kthread_starved", "rcu_timer_wakeup",
                                                "rcu_stall_panic")
    hung = rules_by_reason["HungTask"]
    hung["pattern"] = r".*INFO: task (?P<comm>.+):(?P<pid>\d+) blocked(?P<io_wait> in I/O wait)? for more than (?P<seconds>\d+) seconds\..*"
    hung["x-nodesleuth"]["source"] = ("kernel/hung_task.c check_hung_task() (<=6.x) / hung_task_info() (7.2): 'INFO: "
                                      "task %s:%d blocked for more than %ld seconds.', 7.2 'blocked%s' with ' in I/O wait'")
    hung["x-nodesleuth"]["follow"] = {
        "lines": 60, "why": "7.2 names the lock the task waits on and its likely owner (debug_show_blocker())",
        "patterns": [r"INFO: task .+?:\d+ (?:<[^>]*> )?(?:is )?blocked on an? (?P<lock>mutex|semaphore|rw-semaphore)"
                     r"(?: likely (?:owned|last held) by task (?P<owner_comm>.+?):(?P<owner_pid>\d+))?", PANIC]}
    hung["x-nodesleuth"]["formats"] = lk_formats("hung_task", "hung_task_blocker", "hung_task_panic")
    ppc = {"type": "temporary", "reason": "PowerpcHardLockup",
           "pattern": ".*(?:" + LK["ppc_self_detected"]["pattern"].replace("(?P<pc>\\S+)", "(?P<pc>\\S+(?: \\[[\\w-]+\\])?)")
                      + "|" + LK["ppc_other_cpus"]["pattern"].replace("(?P<old_cpus>", "(?P<other_cpus_old>").replace("(?P<cpus>", "(?P<other_cpus>")
                      .replace("(?P<old_reporter>", "(?P<reporter_old>")
                      + "|" + LK["ppc_cpu_hard_lockup"]["pattern"].replace("(?P<cpu>", "(?P<cpu_v3>") + ").*",
           "x-nodesleuth": {"class": "lockup", "family": "hard_lockup", "driver": "", "kind": "hard_lockup",
                            "severity": "critical",
                            "source": "arch/powerpc/kernel/watchdog.c soft_nmi_interrupt() 'CPU %d self-detected hard "
                                      "LOCKUP @ %pS', watchdog_smp_panic() 'CPU %d detected hard LOCKUP on other CPUs "
                                      "%*pbl', wd_lockup_ipi() 'CPU %d Hard LOCKUP' (4.19+, 5.10-7.2; 4.13-4.1x "
                                      "'Watchdog CPU:%d detected Hard LOCKUP other CPUS:%*pbl', 'Watchdog CPU:%d Hard "
                                      "LOCKUP'); pr_fmt 'watchdog: '",
                            "follow": {"lines": 4, "why": "the next line says how long the CPU missed its heartbeat",
                                       "patterns": [r"TB:\d+, last (?:SMP )?heartbeat TB:\d+ \((?P<ms>\d+)ms ago\)", PANIC]},
                            "formats": lk_formats("ppc_self_detected", "ppc_other_cpus", "ppc_cpu_hard_lockup",
                                                  "ppc_heartbeat")}}
    tasks = {"type": "temporary", "reason": "RcuTasksStall", "pattern": ".*" + LK["rcu_tasks"]["pattern"] + ".*",
             "x-nodesleuth": {"class": "lockup", "family": "rcu_stall", "driver": "", "kind": "rcu_stall",
                              "severity": "critical",
                              "source": "kernel/rcu/tasks.h check_holdout_task() / show_stalled_task_trace() (5.8+; "
                                        "kernel/rcu/update.c 3.18-5.7): a task held off an RCU-tasks grace period; "
                                        "no 'rcu: ' prefix",
                              "formats": lk_formats("rcu_tasks")}}
    wq = {"type": "temporary", "reason": "WorkqueueLockup",
          "pattern": ".*" + LK["workqueue_lockup"]["pattern"].replace("(?P<cpus>", "(?P<pool_cpus>") + ".*",
          "x-nodesleuth": {"class": "lockup", "family": "workqueue_lockup", "driver": "", "kind": "workqueue_lockup",
                           "severity": "critical",
                           "source": "kernel/workqueue.c wq_watchdog_timer_fn(): 'BUG: workqueue lockup - pool cpus=%*pbl "
                                     "node=%d flags=0x%x nice=%d stuck for %us!' (4.5-7.2; ' bh'/' bh-hi' pools 6.9+): "
                                     "a per-CPU pool stuck names a CPU that ran no work items",
                           "follow": {"lines": 40, "why": "a panic follows with workqueue.panic_on_stall",
                                      "patterns": [PANIC]},
                           "formats": lk_formats("workqueue_lockup", "workqueue_panic")}}
    return [ppc, tasks, wq]


def write(path: str):
    rules, out_new, new, fold = build()
    by = {r["reason"]: r for r in rules}
    extra = lockup_rules(by)
    allr = rules + extra + out_new
    for r in allr:
        r["pattern"] = npd_safe(r["pattern"])
        fol = r["x-nodesleuth"].get("follow")
        if fol:
            fol["patterns"] = [npd_safe(p) for p in fol["patterns"]]
        if not r["x-nodesleuth"].get("formats"):
            r["x-nodesleuth"].pop("formats", None)
        re.compile(r["pattern"], re.ASCII)
    reasons = [r["reason"] for r in allr]
    assert len(reasons) == len(set(reasons)), collections.Counter(reasons).most_common(3)
    doc = {k: v for k, v in ORIG.items() if k != "rules"}
    doc["rules"] = allr
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(allr)} rules written to {path}", file=sys.stderr)
    return allr


if __name__ == "__main__" and len(sys.argv) > 1:
    write(sys.argv[1])
