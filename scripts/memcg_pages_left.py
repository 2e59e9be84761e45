"""Which pages keep a probe's memcgs dying (cgroup v1, root): make_zombies(N) under a parent P kept
alive, delete the files, wait, then list the pages still charged under P with their /proc/kpageflags
(/proc/kpagecgroup reports a dying memcg's pages as its nearest online ancestor's: P). Found with it:
3 pages `REFERENCED LRU ACTIVE PRIVATE` (ext4 inode-table blocks in the block device's cache) before
the fix, 0 after (docs/probes.md).

usage: memcg_pages_left.py BASE_DIR N [WAIT_S]     e.g. /var/tmp 50"""
import os, sys, struct, time, collections
from nodesleuth.node.cgroupfs import make_zombies, pin_dir, drop_pin_dir, remove_cgroup_tree
base, n = sys.argv[1], int(sys.argv[2])
M = "/sys/fs/cgroup/memory"
P = os.path.join(M, f"pins2-{os.getpid()}"); os.mkdir(P)
ino = os.stat(P).st_ino
data = pin_dir(base, "pins2")
made = make_zombies(n, P, data, file_bytes=4096, prefix="p")
drop_pin_dir(data)
time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 3)
FLAGS = "LOCKED ERROR REFERENCED UPTODATE DIRTY LRU ACTIVE SLAB WRITEBACK RECLAIM BUDDY MMAP ANON SWAPCACHE SWAPBACKED COMPOUND_HEAD COMPOUND_TAIL HUGE UNEVICTABLE HWPOISON NOPAGE KSM THP OFFLINE ZERO_PAGE IDLE PGTABLE b27 b28 b29 b30 b31 RESERVED MLOCKED MAPPEDTODISK PRIVATE PRIVATE_2 OWNER_PRIVATE ARCH UNCACHED SOFTDIRTY ARCH_2".split()
pages = []
with open("/proc/kpagecgroup", "rb") as cgf, open("/proc/kpageflags", "rb") as ff:
    pfn = 0
    while True:
        c = cgf.read(8 * 65536)
        if not c: break
        vals = struct.unpack(f"{len(c)//8}Q", c)
        for i, v in enumerate(vals):
            if v == ino:
                ff.seek(8 * (pfn + i)); fl = struct.unpack("Q", ff.read(8))[0]
                pages.append((pfn + i, " ".join(FLAGS[b] for b in range(len(FLAGS)) if fl >> b & 1)))
        pfn += len(vals)
print(base, "made", made, "pages still charged under P:", len(pages), collections.Counter(f for _, f in pages).most_common(6))
print("usage", open(os.path.join(P, "memory.usage_in_bytes")).read().strip(), "stat:", {l.split()[0]: l.split()[1] for l in open(os.path.join(P, "memory.stat")) if l.split()[1] != "0" and l.startswith("total_")})
remove_cgroup_tree(P)
