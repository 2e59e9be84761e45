"""The lab's actors, each a small program run as its own process with a telling name (comm):
the ECS-agent-like crasher, the kubelet-like memory.stat poller, and a CPU hog."""

ECS_AGENT = r'''
import ctypes, os, sys
ctypes.CDLL(None).prctl(15, b"ecs-agent", 0, 0, 0)
MEM = "/sys/fs/cgroup/memory"
parent = os.path.join(MEM, sys.argv[1])
data = sys.argv[2]
per_start = int(sys.argv[3])
me = str(os.getpid())
home = next(l.split(":", 2)[2].strip() for l in open("/proc/self/cgroup") if ":memory:" in l)
os.makedirs(os.path.join(parent, "docker"), exist_ok=True)
os.makedirs(data, exist_ok=True)
for _ in range(per_start):
    cid = os.urandom(32).hex()  # a new agent container each try, as ecs-init does
    cg = os.path.join(parent, "docker", cid)
    os.mkdir(cg)
    open(os.path.join(cg, "cgroup.procs"), "w").write(me)
    with open(os.path.join(data, cid), "wb") as f:  # image layers, logs, agent state: page cache
        f.write(os.urandom(65536))
    open(os.path.join(MEM + home, "cgroup.procs"), "w").write(me)
    os.rmdir(cg)
print("level=critical msg=\"Unable to register as a container instance with ECS: ClientException: "
      "Cluster not found.\"", flush=True)
sys.exit(1)
'''

KUBELET = r'''
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(15, b"kubelet", 0, 0, 0)
os.sched_setaffinity(0, {int(sys.argv[1])})
MEM = "/sys/fs/cgroup/memory"
interval = float(sys.argv[2])
def dirs():
    out = [MEM]
    for dp, dn, _ in os.walk(MEM):
        out += [os.path.join(dp, d) for d in dn]
        if len(out) > 500:
            break
    return out
n = 0
while True:
    t = time.time()
    if n % 50 == 0:
        tree = dirs()
    n += 1
    for d in tree:  # cAdvisor housekeeping: memory.stat and (runc) memory.numa_stat of every cgroup
        for name in ("memory.stat", "memory.numa_stat"):
            try:
                fd = os.open(os.path.join(d, name), os.O_RDONLY)
                try:
                    os.read(fd, 65536)
                finally:
                    os.close(fd)
            except OSError:
                pass
    time.sleep(max(0.0, interval - (time.time() - t)))
'''

HOG = r'''
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(15, b"lab-hog", 0, 0, 0)
os.sched_setaffinity(0, {int(sys.argv[1])})
burst, gap, delay = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
time.sleep(delay)
def lab_hog_spin(until):
    x = 0
    while time.time() < until:
        x += 1
while True:
    lab_hog_spin(time.time() + burst)
    time.sleep(gap)
'''

ECS_UNIT = """[Unit]
Description=Amazon ECS Agent (nodesleuth lab reproduction: cannot reach its cluster)
StartLimitIntervalSec=0

[Service]
Type=simple
ExecStart={python} {agent} {parent} {data} {per_start}
Restart=on-failure
RestartSec={restart_sec}

[Install]
WantedBy=multi-user.target
"""

ENA_LINES = [
    (4, "ena 0000:00:05.0 ens5: TX q 3 is paused for too long (threshold 5000000). Time since last napi "
        "{napi_usec} usec. napi scheduled: 1"),
    (4, "ena 0000:00:05.0 ens5: napi handler hasn't been called for a long time but is scheduled"),
    (6, "ena 0000:00:05.0: Trigger reset is on"),
    (6, "ena 0000:00:05.0: Device reset completed successfully, Driver info: Elastic Network Adapter (ENA) v2.11.0g"),
]
