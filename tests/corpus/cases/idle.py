"""An idle node: only the recorder runs for the whole window. No incident."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": False, "family": None, "root_cause": None}


def run(x):
    with x.episode("quiet"):
        x.sleep(30)
