"""Held out. A parallel build on 6.12 (`make -j4` on a 4-CPU node): four job slots, one per CPU, each a
shell running compiler jobs (`cc1`, corpus_tool spinning 2 s: one translation unit each) back to back for
20 s. Every core is saturated at once, none stands out (the others average far above 60%): load, not a
starved core. explain must find no incident."""

HELD_OUT = True
KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": False, "family": None, "root_cause": None}


def setup(x):
    x.sh(f"cp {x.tool_path} /run/cc1 && chmod +x /run/cc1")


def run(x):
    with x.episode():
        x.wait(*[x.spawn(["timeout", "20", "taskset", "-c", str(c), "sh", "-c",
                          f"while :; do /run/cc1 cc1 spin 2 {c}; done"]) for c in range(4)])
