"""Write a golden store: a real 8 s recording of this host with a crash-looping unit in a systemd
namespace, a pinned busy loop, a recorded kmsg file gaining ENA lines mid-recording, the continuous
profile and the cgroup churn trace; plus what that version's `dump` (json, csv) and `flame --format
folded` printed for it. Every later version must read the store back with equal values.

usage: python make_golden.py SRC_DIR OUT_STORE   (store-v1 was written by nodesleuth 0.1.0, commit
456e08b, with SRC_DIR a checkout of that commit; store-v2 by 0.2.0; store-v3, the packed ticks,
segment heads, frame index and 10 s tier of schema 3 (one segment: no trained dictionary;
tests/test_store_pack.py covers those), by the `month` branch)"""
import os, subprocess, sys, time, shutil
SRC = os.path.abspath(sys.argv[1])
sys.path.insert(0, os.path.join(SRC, "src"))
sys.path.insert(0, os.path.join(SRC, "tests"))
from nodesleuth.lab.systemd import SystemdNamespace
from conftest import start_crasher, BUSY
out = sys.argv[2]
ver = os.path.basename(out).split("-")[-1]
shutil.rmtree(out, ignore_errors=True)
kmsg = "/var/tmp/golden-kmsg.txt"
up = time.clock_gettime(time.CLOCK_MONOTONIC)
with open(kmsg, "w") as f:
    f.write(f"6,1,{int((up-30)*1e6)},-;Linux version test\n")
    f.write(f"4,2,{int((up-2)*1e6)},-;ena 0000:00:05.0 eth0: TX q 5 is paused for too long (threshold 5000000). Time since last napi 6596000 usec. napi scheduled: 1\n")
    f.write(f"4,3,{int((up-2)*1e6)},-;ena 0000:00:05.0 eth0: napi handler hasn't been called for a long time but is scheduled\n")
    f.write(f"6,4,{int((up-1)*1e6)},-;ena 0000:00:05.0: Device reset completed successfully, Driver info: Elastic Network Adapter (ENA) v2.11.0g\n")
env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "src"))
with SystemdNamespace() as ns:
    start_crasher(ns, 1)
    import threading
    def later():
        time.sleep(4)
        up = time.clock_gettime(time.CLOCK_MONOTONIC)
        with open(kmsg, "a") as f:
            f.write(f"4,5,{int(up*1e6)},-;ena 0000:00:05.0 eth0: TX q 2 is paused for too long (threshold 5000000). Time since last napi 7100000 usec. napi scheduled: 1\n")
            f.write(f"4,6,{int(up*1e6)+10},-;ena 0000:00:05.0 eth0: napi handler hasn't been called for a long time but is scheduled\n")
            f.write(f"6,7,{int(up*1e6)+900000},-;ena 0000:00:05.0: Device reset completed successfully, Driver info: Elastic Network Adapter (ENA) v2.11.0g\n")
    threading.Thread(target=later, daemon=True).start()
    hog = subprocess.Popen([sys.executable, "-c", BUSY, "1", "golden-hog"])
    rec = subprocess.run([sys.executable, "-m", "nodesleuth", "record", "--store", out, "--quiet",
                          "--duration", "8", "--systemd-pid", str(ns.pid), "--kmsg", kmsg,
                          "--profile", "--profile-rotate", "3", "--trace-churn"],
                         env=env, capture_output=True, text=True)
    hog.kill(); hog.wait()
    print(rec.returncode, rec.stderr[-2000:])
for fmt in ("json", "csv"):
    p = subprocess.run([sys.executable, "-m", "nodesleuth", "dump", "--store", out, "--format", fmt,
                        "-o", os.path.join(os.path.dirname(out), f"golden-{ver}.{fmt}")], env=env, capture_output=True, text=True)
    print(fmt, p.returncode, p.stderr[-500:])
p = subprocess.run([sys.executable, "-m", "nodesleuth", "flame", "--store", out, "--format", "folded",
                    "-o", os.path.join(os.path.dirname(out), f"golden-{ver}.folded")], env=env, capture_output=True, text=True)
print("flame", p.returncode, p.stderr[-500:])
