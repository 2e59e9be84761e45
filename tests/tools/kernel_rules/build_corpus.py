"""Add issue 28's REAL lines (with their URLs) to tests/data/kernel-log/corpus.json and write the lines generated from
format strings to tests/data/kernel-log/generated.json (each "generated": true, with its format and source).

Real lines: part A/B entries' `real`, lockups.json `real` (header role -> must_match, other roles -> must_match false:
a detail/panic/context line of a report is not an event of its own), the real look-alikes of part A (corpus-context),
part B (16) and lockups-lookalikes (non-generated). Generated: the entries' `generated` lines (must_match with their
family) and the generated look-alikes (must_match false)."""

from __future__ import annotations

import json
import re
import sys

WT = "/work/wt/kernlog"
CORPUS = f"{WT}/tests/data/kernel-log/corpus.json"
GEN = f"{WT}/tests/data/kernel-log/generated.json"
AL = json.load(open("/work/scratch/drivers/part-A-lookalikes.json"))
BL = json.load(open("/work/scratch/drivers/part-B-lookalikes.json"))
L = json.load(open("/work/scratch/lockups/lockups.json"))
LL = json.load(open("/work/scratch/lockups/lockups-lookalikes.json"))
ALLFMT = [json.loads(x) for x in open("/work/scratch/drivers/tools/all.jsonl")]

sys.path.insert(0, "/work/scratch/kernlog")
from build_rules import A, B, FIX_GEN, ref, versions_of  # noqa: E402

corpus = json.load(open(CORPUS))
have = {c["line"] for c in corpus}
added = {"real_nic": 0, "real_lockup": 0, "real_lookalike": 0}


def add(line, source, family, kind, must, note):
    if line in have:
        return False
    have.add(line)
    corpus.append({"line": line, "source": source, "family": family, "kind": kind, "must_match": must, "note": note})
    return True


def src_of(e) -> str:
    return "; ".join(ref(s) for s in e["sources"][-2:])


for part, entries in (("part A", A), ("part B", B)):
    for e in entries:
        for r in e["real"]:
            note = f"issue 28 {part}: {e['driver']} {e['function']}() {e['format'].splitlines()[0][:80]!r}"
            if r.get("note"):
                note += f"; {r['note']}"
            if add(r["line"], r["source"], e["family"], e["kind"], True, note):
                added["real_nic"] += 1

ROLE_MUST = {"header": True}
for e in L:
    for r in e["real"]:
        must = e["role"] == "header"
        kind = e["family"] if must else {"panic": "panic", "detail": "detail", "context": "context",
                                          "recovery": "recovery"}.get(e["role"], "none")
        note = (f"issue 28 lockups ({e['id']}, {e['role']}): {r.get('note', '')}" if must else
                f"issue 28 lockups ({e['id']}, {e['role']} line of a {e['family']} report: read by the header "
                f"rule's follow patterns, not an event of its own): {r.get('note', '')}")
        fam = e["family"] if must else "lookalike"
        if fam == "nmi_backtrace":
            fam = "lookalike"
        if add(r["line"], r["source"], fam, kind, must, note.rstrip(": ")):
            added["real_lockup"] += 1

for x in AL:
    if not x.get("generated") and add(x["line"], x["source"], "lookalike", "none", False,
                                      f"issue 28 part A look-alike ({x['driver']}): {x['why']}"):
        added["real_lookalike"] += 1
for x in BL:
    if x.get("generated"):
        continue
    if x.get("matches_family") == "netdev_watchdog":
        if add(x["line"], x["source"], "netdev_watchdog", "tx_timeout", True,
               f"issue 28 part B: {x['why']}"):
            added["real_nic"] += 1
    elif add(x["line"], x["source"], "lookalike", "none", False, f"issue 28 part B look-alike ({x['driver']}): {x['why']}"):
        added["real_lookalike"] += 1
for x in LL:
    if not x.get("generated") and add(x["line"], x["source"], "lookalike", "none", False,
                                      f"issue 28 lockups look-alike: {x['why_not_a_lockup']}"):
        added["real_lookalike"] += 1

with open(CORPUS, "w") as f:
    json.dump(corpus, f, indent=1, ensure_ascii=False)
    f.write("\n")


# ---------------------------------------------------------------- generated lines

def fmt_regex(fmt: str) -> re.Pattern:
    first = fmt.replace("\\n", "\n").split("\n")[0]
    parts = re.split(r"%[-+ #0]*\*?\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t|L)?(?:p[A-Za-z]{1,3}|[diouxXcsfeEgGaAn])", first)
    return re.compile("(?:" + ".*?".join(re.escape(p) for p in parts) + r")\s*$")


BY_DRV: dict[str, list] = {}
for x in ALLFMT:
    BY_DRV.setdefault(x["drv"], []).append(x)


def find_format(driver: str, line: str):
    for cand in (driver, driver.replace("_core", ""), driver.split("_")[0]):
        for x in BY_DRV.get(cand, []):
            f = x["fmt"]
            if len(re.sub(r"%\S+", "", f)) < 6:
                continue
            if fmt_regex(f).search(line):
                return x
    return None


gen = []
for part, entries in (("part-A", A), ("part-B", B)):
    for e in entries:
        for g in e["generated"]:
            for line in FIX_GEN.get(g, [g]):
                gen.append({"line": line, "generated": True, "must_match": True, "family": e["family"],
                            "kind": e["kind"], "driver": e["driver"], "format": e["format"],
                            "source": f"{e['path']} {e['function']}() ({', '.join(versions_of(e))}): {src_of(e)}",
                            "from": f"/work/scratch/drivers/{part}.json (issue 28)"})
for e in L:
    for g in e["generated"]:
        must = e["role"] == "header"
        gen.append({"line": g["line"], "generated": True, "must_match": must,
                    "family": e["family"] if must else "lookalike", "kind": e["family"] if must else e["role"],
                    "format": e["format"], "source": f"{e['path']} {e['function']}(): " + "; ".join(e["sources"][:2]),
                    "from": "/work/scratch/lockups/lockups.json (issue 28)"})
nf = 0
for x in AL:
    if x.get("generated"):
        f = find_format(x["driver"], x["line"])
        if f is None:
            nf += 1
        gen.append({"line": x["line"], "generated": True, "must_match": False, "family": "lookalike", "kind": "none",
                    "driver": x["driver"], "why": x["why"], "format": f and f["fmt"],
                    "source": (f"Debian linux-source-{f['ver']} {f['path']}:{f['line']} {f['func']}()" if f else
                               "written by the part-A helper from the driver's message (format not recorded)"),
                    "from": "/work/scratch/drivers/part-A-lookalikes.json (issue 28)"})
for x in BL:
    if x.get("generated"):
        sl = x.get("source_line") or {}
        core = x.get("family") == "netdev_watchdog" or "NETDEV WATCHDOG:" in x["line"]
        gen.append({"line": x["line"], "generated": True, "must_match": core,
                    "family": "netdev_watchdog" if core else "lookalike", "kind": "tx_timeout" if core else "none",
                    "driver": x["driver"], "why": x["why"], "format": x.get("format"),
                    "source": f"{sl.get('tree', '')} {sl.get('path', '')}:{sl.get('line', '')}".strip(),
                    "from": "/work/scratch/drivers/part-B-lookalikes.json (issue 28)"})
for x in LL:
    if x.get("generated"):
        gen.append({"line": x["line"], "generated": True, "must_match": False, "family": "lookalike", "kind": "none",
                    "why": x["why_not_a_lockup"], "format": x.get("format"), "source": x["source"],
                    "from": "/work/scratch/lockups/lockups-lookalikes.json (issue 28)"})
# one line once (the same rendered text can come from two formats): keep the first
seen, out = set(), []
for g in gen:
    if g["line"] in seen or g["line"] in have:
        continue
    seen.add(g["line"])
    out.append(g)
doc = {"about": "Lines GENERATED from printk format strings read in kernel sources (issue 28), not seen in any log: "
                "each has the format and where it was read. must_match=true lines must be matched by a rule of "
                "their family; must_match=false lines are other messages of the same drivers that no rule may match. "
                "Real lines (with URLs) are in corpus.json.",
       "lines": out}
with open(GEN, "w") as f:
    json.dump(doc, f, indent=1, ensure_ascii=False)
    f.write("\n")
print(added, "corpus now", len(corpus), "| generated", len(out),
      sum(1 for g in out if g["must_match"]), "must match;", nf, "look-alikes without a found format", file=sys.stderr)
