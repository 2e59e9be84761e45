"""Runs INSIDE a 7.2 VM with a scratch disk (vmrun disk_mb=256): when does a memcg that wrote a file stop
dying? A/B: 100 each, written (B with fsync); an empty memcg offline, sync, both; C: no sync, an offline
every 5 s. Printed as it goes (tests/vm/README.md, \"Until writeback, not for ever\")."""
import os, time
CG="/sys/fs/cgroup"
def dying(p):
    return int(dict(l.split() for l in open(p+"/cgroup.stat"))["nr_dying_descendants"])
open(CG+"/cgroup.subtree_control","w").write("+memory")
def mk(name, n, d, fsync=False):
    par=f"{CG}/{name}"; os.mkdir(par); open(par+"/cgroup.subtree_control","w").write("+memory")
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        c=f"{par}/z{i}"; os.mkdir(c)
        pid=os.fork()
        if pid==0:
            open(c+"/cgroup.procs","w").write("0")
            with open(f"{d}/f{i}","wb") as f:
                f.write(b"x"*4096)
                if fsync: os.fsync(f.fileno())
            os._exit(0)
        os.waitpid(pid,0)
        for _ in range(100):
            try: os.rmdir(c); break
            except OSError: time.sleep(0.01)
    return par
def trigger():
    c=f"{CG}/trig{time.monotonic_ns()}"; os.mkdir(c); os.rmdir(c)
print("dirty_expire", open("/proc/sys/vm/dirty_expire_centisecs").read().strip(), flush=True)
a=mk("A",100,"/run/disk/A")
b=mk("B",100,"/run/disk/B", fsync=True)
time.sleep(2); print("2s", dying(a), dying(b), flush=True)
trigger(); time.sleep(2); print("after trigger", dying(a), dying(b), flush=True)
os.sync(); time.sleep(1); print("after sync no trigger", dying(a), dying(b), flush=True)
trigger(); time.sleep(2); print("after sync+trigger", dying(a), dying(b), flush=True)
c=mk("C",100,"/run/disk/C")
t=time.monotonic()
while dying(c) and time.monotonic()-t<60:
    time.sleep(5); trigger(); time.sleep(1)
    print("C no sync, trigger every 5 s", round(time.monotonic()-t), dying(c), flush=True)
