"""Frame -> driver map for tying a lockup's stack trace to a NIC driver (issue 28 part 3), read from the drivers'
sources: every `.ndo_start_xmit = f` and every `netif_napi_add*(dev, napi, f, ...)` (and 5.10's netif_tx_napi_add)
in drivers/net/{ethernet,usb,hyperv,vmxnet3} and drivers/net/{virtio_net,xen-netfront}.c of the Debian trees
5.10/6.1/6.12/7.2 (usage: build_frames.py KSRC, KSRC holding linux-5.10 ... linux-7.2 unpacked from
Debian's linux-source packages 5.10.223, 6.1.176, 6.12.117, 7.2.13); the module a file belongs to from its directory's Makefile (kbuild: '-' -> '_'); a driver's
function-name prefixes from those functions' names. Writes src/nodesleuth/rules/nic-frames.json."""

from __future__ import annotations

import collections
import json
import os
import re
import sys

KSRC = sys.argv[1] if len(sys.argv) > 1 else "ksrc"  # holds linux-5.10/ ... linux-7.2/ (Debian linux-source trees)
TREES = {"5.10": "linux-5.10", "6.1": "linux-6.1", "6.12": "linux-6.12", "7.2": "linux-7.2"}
DEB = {"5.10": "5.10.223", "6.1": "6.1.176", "6.12": "6.12.117", "7.2": "7.2.13"}
DIRS = ["drivers/net/ethernet", "drivers/net/usb", "drivers/net/hyperv", "drivers/net/vmxnet3"]
FILES = ["drivers/net/virtio_net.c", "drivers/net/xen-netfront.c"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "src", "nodesleuth", "rules", "nic-frames.json")
RULES = os.path.join(ROOT, "src", "nodesleuth", "rules", "kernel-net.json")
NOT_FUNC = {"NULL", "poll", "napi", "fn", "cb", "poll_fn", "handler", "func", "xmit", "napi_poll", "poll_func"}
GENERIC = {"free", "send", "get", "set", "init", "handle", "process", "hw", "sw", "common", "generic", "rio", "xl",
           "lib", "new", "old", "vf", "pf", "usb", "spi", "ti", "fsl", "mtk", "mv", "ns", "skb", "queue", "ring",
           "","start", "net", "dev", "napi", "xmit", "eth", "tx", "rx", "poll", "do", "hard", "netdev", "ndo", "", "ei",
           "my", "lan", "mac", "gem", "emac", "sun", "fs", "ftmac", "octeon", "bcm", "rtl", "nv", "ql", "vnic", "xgene",
           "mlx", "hns", "fbnic", "nic", "priv", "ether", "ks", "au", "efx", "ef", "be", "bnx", "cp", "sis", "tsi",
           "ace", "el", "elp", "ax", "cpmac", "port", "enet", "eql", "gve", "ipoib", "qca", "am", "ll", "hip", "cas"}


FAMILY = {"mlx5_core": "mlx5", "mlx4_en": "mlx4", "mlx4_core": "mlx4", "rvu_nicpf": "octeontx2",
          "rvu_nicvf": "octeontx2", "octeontx2_nicpf": "octeontx2", "octeontx2_nicvf": "octeontx2",
          "xen_netfront": "xen_netfront", "i40evf": "iavf", "r8169": "r8169", "8139too": "8139too", "atp": "atp"}


def c_files(root: str):
    for d in DIRS:
        for dp, _, fs in os.walk(os.path.join(root, d)):
            for f in fs:
                if f.endswith(".c"):
                    yield os.path.join(dp, f)
    for f in FILES:
        p = os.path.join(root, f)
        if os.path.exists(p):
            yield p


def strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", " ", src)


def args_of(src: str, start: int) -> list[str]:
    """Top-level comma-separated arguments of the call whose '(' is at src[start]."""
    depth, cur, out = 0, [], []
    for ch in src[start:]:
        if ch == "(":
            depth += 1
            if depth == 1:
                continue
        elif ch == ")":
            depth -= 1
            if depth == 0:
                out.append("".join(cur).strip())
                return out
        elif ch == "," and depth == 1:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    return out


MK_CACHE: dict[str, list[tuple[str, str]]] = {}


def makefile_rules(d: str) -> list[tuple[str, str]]:
    """(module, object path relative to d) pairs from d/Makefile."""
    if d in MK_CACHE:
        return MK_CACHE[d]
    out = []
    mk = os.path.join(d, "Makefile")
    if os.path.exists(mk):
        text = open(mk, errors="replace").read().replace("\\\n", " ")
        for m in re.finditer(r"^\s*([\w-]+)-(?:y|objs|\$\([\w]+\))\s*[:+]?=\s*(.*)$", text, re.M):
            mod = m.group(1)
            if re.search(r"\$\(" + re.escape(mod) + r"-(?:y|objs)\)", text):
                continue  # a make variable spliced into another module's list, not a module
            if mod in ("obj", "ccflags", "subdir", "always", "lib", "extra", "CFLAGS", "asflags", "ldflags"):
                continue
            for o in m.group(2).split():
                if o.endswith(".o"):
                    out.append((mod, o))
        for m in re.finditer(r"^\s*obj-(?:y|m|\$\([\w]+\))\s*[:+]?=\s*(.*)$", text, re.M):
            for o in m.group(1).split():
                if o.endswith(".o"):
                    out.append((o[:-2], o))
    MK_CACHE[d] = out
    return out


def module_of(path: str, root: str) -> str:
    d, rel = os.path.dirname(path), os.path.basename(path)[:-2] + ".o"
    stop = os.path.join(root, "drivers")
    while d.startswith(stop):
        objs = makefile_rules(d)
        mods = [m for m, o in objs if o == rel and m != rel[:-2]]
        if mods:
            mod = mods[0]
            # a composite object listed again by its parent: follow it up (foo-y := a.o; bar-y += foo.o)
            return mod.replace("-", "_")
        if any(o == rel for _, o in objs):
            return rel[:-2].replace("-", "_").split("/")[-1]
        rel = os.path.basename(d) + "/" + rel
        d = os.path.dirname(d)
    return os.path.basename(path)[:-2].replace("-", "_")


DEF_CACHE: dict[str, set] = {}


def mod_defined(mod: str, srcs: dict) -> set:
    if mod not in DEF_CACHE:
        d = set()
        for src in srcs.values():
            d.update(re.findall(r"^(?:static\s+|inline\s+|noinline\s+|__\w+\s+)*(?:const\s+|unsigned\s+|"
                                r"struct\s+\w+\s*|enum\s+\w+\s*)?\w+[\s\*]+(\w+)\s*\(", src, re.M))
        DEF_CACHE[mod] = d
    return DEF_CACHE[mod]


def body_len(src: str, start: int) -> int:
    depth = 1
    for i in range(start, min(len(src), start + 200000)):
        c = src[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i - start
    return 0


def main():
    mod_srcs: dict[str, dict] = {}
    funcs: dict[str, dict] = {}
    mod_files: dict[str, set] = collections.defaultdict(set)
    calls: dict[str, dict] = {}
    for ver, tree in TREES.items():
        root = os.path.join(KSRC, tree)
        defined = set()  # every function defined in these drivers: a poll/xmit argument must be one of them
        for path in c_files(root):
            src = strip_comments(open(path, errors="replace").read())
            defined.update(re.findall(r"^(?:static\s+|inline\s+|noinline\s+|__\w+\s+)*(?:const\s+|unsigned\s+|"
                                      r"struct\s+\w+\s*|enum\s+\w+\s*)?\w+[\s\*]+(\w+)\s*\(", src, re.M))
        for path in c_files(root):
            src = strip_comments(open(path, errors="replace").read())
            rel = os.path.relpath(path, root)
            found = []
            for m in re.finditer(r"\.ndo_start_xmit\s*=\s*(\w+)", src):
                found.append((m.group(1), "xmit"))
            for m in re.finditer(r"\b(?:netif_napi_add\w*|netif_tx_napi_add)\s*\(", src):
                a = args_of(src, m.end() - 1)
                if len(a) >= 3:
                    for ident in re.findall(r"\b[A-Za-z_]\w*\b", a[2]):
                        found.append((ident, "napi_poll"))
            if not found:
                continue
            mod = module_of(path, root)
            mod_srcs.setdefault(mod, {})[rel] = src
            for fn, role in found:
                if fn.isupper() or fn in NOT_FUNC or fn not in defined:
                    continue  # a macro, NULL, or a helper's parameter (the caller passes the function)
                e = funcs.setdefault(fn, {"role": role, "modules": {}, })
                e["modules"].setdefault(mod, {"files": set(), "versions": set()})
                e["modules"][mod]["files"].add(rel)
                e["modules"][mod]["versions"].add(ver)
                mod_files[mod].add(rel)
        # the driver functions a poll/xmit function calls directly (static helpers such as virtio_net's
        # free_old_xmit_skbs), when defined in the same module: they show in stacks without the root frame
        for mod, srcs in mod_srcs.items():
            for rel, src in srcs.items():
                for fn, e in funcs.items():
                    if mod not in e["modules"]:
                        continue
                    for m in re.finditer(r"^[^\s#][^;{}]*?\b" + re.escape(fn) + r"\s*\([^;{]*\)\s*\{", src, re.M):
                        body = src[m.end():m.end() + body_len(src, m.end())]
                        for callee in set(re.findall(r"\b([a-z_]\w+)\s*\(", body)):
                            if callee == fn or callee in funcs or callee not in mod_defined(mod, srcs):
                                continue
                            c = calls.setdefault(callee, {"modules": {}, "called_by": set()})
                            c["modules"].setdefault(mod, set()).add(ver)
                            c["called_by"].add(fn)
        mod_srcs.clear()
        DEF_CACHE.clear()
    # prefixes: the first name segment of a module's poll/xmit functions, if no other module's functions use it
    seg_mods: dict[str, set] = collections.defaultdict(set)
    for fn, e in funcs.items():
        seg = fn.split("_")[0]
        for mod in e["modules"]:
            seg_mods[seg].add(mod)
    prefixes = {}
    for seg, mods in sorted(seg_mods.items()):
        if len(seg) < 3 or seg.lower() in GENERIC or seg.startswith("__"):
            continue
        prefixes[seg + "_"] = sorted(mods)
    # module -> rules family, through the files each rule's formats were read from
    rules = json.load(open(RULES))["rules"]
    file_fam = {}
    for r in rules:
        for f in r["x-nodesleuth"].get("formats", []):
            file_fam.setdefault(f["file"], r["x-nodesleuth"]["family"])
    fam_dir = {}
    for fpath, fam in file_fam.items():
        fam_dir.setdefault(os.path.dirname(fpath), fam)
    modules = {}
    for mod, files in sorted(mod_files.items()):
        fams = [file_fam[f] for f in sorted(files) if f in file_fam]
        modules[mod] = {"family": FAMILY.get(mod) or (fams[0] if fams else mod), "files": sorted(files)}
    doc = {"about": "Which kernel module a stack frame belongs to, for tying a lockup's stack trace to a NIC driver. "
                    "Read from Debian linux-source " + ", ".join(f"{v} ({DEB[v]})" for v in TREES) +
                    ": every '.ndo_start_xmit = f' (role xmit) and the poll function of every netif_napi_add*() call "
                    "(role napi_poll) in drivers/net/{ethernet,usb,hyperv,vmxnet3}, virtio_net.c and xen-netfront.c; "
                    "calls = the functions of the same module those call directly; "
                    "module = the kbuild module of the file (its Makefile, '-' as '_'); prefixes = the first segment "
                    "of those function names with the modules using it (generic segments left out). Generated by the "
                    "issue-28 helper (build_frames.py), not edited by hand.",
           "functions": {fn: {"role": e["role"], "modules": {m: {"files": sorted(v["files"]),
                                                                 "versions": sorted(v["versions"], key=lambda x: [int(p) for p in x.split(".")])}
                                                             for m, v in sorted(e["modules"].items())}}
                         for fn, e in sorted(funcs.items())},
           "calls": {fn: {"modules": {m: sorted(v, key=lambda x: [int(p) for p in x.split(".")])
                                      for m, v in sorted(c["modules"].items())}, "called_by": sorted(c["called_by"])}
                     for fn, c in sorted(calls.items())},
           "prefixes": prefixes, "modules": modules}
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    print(len(funcs), "functions,", len(prefixes), "prefixes,", len(modules), "modules", file=sys.stderr)
    for fn in ("ixgbe_poll", "mlx5e_napi_poll", "mlx5e_xmit", "ena_io_poll", "virtnet_poll", "start_xmit", "igb_poll",
               "bnxt_poll", "e1000_xmit_frame", "ena_start_xmit", "i40e_napi_poll", "gve_napi_poll"):
        print(fn, funcs.get(fn, {}).get("modules", {}).keys() if fn in funcs else None, file=sys.stderr)
    for p in ("ixgbe_", "mlx5e_", "ena_", "virtnet_", "e1000_", "igb_"):
        print(p, prefixes.get(p), file=sys.stderr)


if __name__ == "__main__":
    main()
