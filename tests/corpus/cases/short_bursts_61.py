"""Held out. Short bursts and no hot core on 6.1: a batch scheduler's short jobs (`thumb-render`, corpus_tool
spinning 2.0 s each), one at a time, each pinned to a different CPU in turn (1, 3, 0, 2, ...) with 2.5 s
of pause between them, for about 36 s: image thumbnails rendered on demand. A core is saturated for 2 s
at most (two 1 s ticks), clearly under the hot-core rule's 3 s (HOT_SECONDS, with its 0.25 s jitter
allowance: 2.75 s), and each CPU rests for many seconds between its bursts. explain must find no incident."""

HELD_OUT = True
KERNEL = "6.1"
CPUS = 4
EXPECT = {"incident": False, "family": None, "root_cause": None}

ORDER = [1, 3, 0, 2, 1, 3, 0, 2]


def run(x):
    with x.episode():
        for cpu in ORDER:
            x.wait(x.tool("thumb-render", "spin", 2.0, cpu))
            x.sleep(2.5)
