"""Child processes that never outlive nodesleuth, SIGKILL included.

Every child is started with PR_SET_PDEATHSIG, so the kernel signals it when the thread that started
it dies, however it dies. A child that writes scratch files (perf's chunks) runs under a small
reaper (`python -m nodesleuth.node.children SCRATCH -- CMD...`): the reaper dies-with-parent on SIGTERM,
forwards SIGINT/SIGTERM to the command, and when nodesleuth is gone kills the command and removes
the scratch directory, so neither a process nor a temp file survives a kill -9 for long.

PDEATHSIG follows the *thread* that forked: callers start children from a thread that lives as long
as the child should (the main thread, or the runner's own loop thread).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> None:
    """Ask the kernel to send `sig` to this process when its parent thread dies; exit at once if
    the parent is already gone (it died between fork and here)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


SETPRIV = shutil.which("setpriv")  # util-linux: sets PR_SET_PDEATHSIG, then execs the command


def spawn(cmd: list[str], sig: int = signal.SIGKILL, **kw) -> subprocess.Popen:
    """Start cmd so that the kernel signals it when this thread dies. Through `setpriv --pdeathsig`
    (no Python code runs between fork and exec, which is not safe in a threaded process); a
    preexec_fn only where setpriv is missing."""
    if SETPRIV:
        return subprocess.Popen([SETPRIV, f"--pdeathsig={signal.Signals(sig).name[3:]}", "--", *cmd], **kw)
    parent = os.getpid()
    return subprocess.Popen(cmd, preexec_fn=lambda: die_with_parent(sig, parent), **kw)


def run(cmd: list[str], timeout: float | None = None, input: str | None = None, check: bool = False,
        **kw) -> subprocess.CompletedProcess:
    """subprocess.run through spawn(): a command still waiting (a systemctl on a busy systemd, a
    sync on a slow disk) dies with us. Output is captured as text unless the caller says otherwise;
    on timeout the command is killed and TimeoutExpired raised, and `check` raises
    CalledProcessError, as subprocess.run does."""
    kw.setdefault("stdin", subprocess.PIPE if input is not None else subprocess.DEVNULL)
    if "stdout" not in kw and "stderr" not in kw:
        kw["stdout"] = kw["stderr"] = subprocess.PIPE
        kw.setdefault("text", True)
    with spawn(cmd, **kw) as p:
        try:
            out, err = p.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise
    done = subprocess.CompletedProcess(cmd, p.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def spawn_reaped(cmd: list[str], scratch: str, **kw) -> subprocess.Popen:
    """`cmd` under a reaper that removes `scratch` if nodesleuth dies first. The reaper starts with
    SIGINT/SIGTERM blocked (inherited across exec), so a stop request that arrives while its Python
    is still starting waits for its handler instead of killing it."""
    kw.setdefault("start_new_session", True)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        return spawn([sys.executable, "-m", "nodesleuth.node.children", scratch, "--", *cmd], signal.SIGTERM, **kw)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _reap(argv: list[str]) -> int:
    scratch, sep, cmd = argv[0], argv[1], argv[2:]
    if sep != "--" or not cmd:
        print("usage: python -m nodesleuth.node.children SCRATCH -- CMD...", file=sys.stderr)
        return 2
    orphaned: list[int] = []
    pending: list[int] = []
    child = None

    def forward(sig, _frame):
        if sig == signal.SIGTERM and os.getppid() == 1:
            orphaned.append(1)  # our parent died (PDEATHSIG) or we were adopted: clean up behind it
        if child is None:
            pending.append(sig)
            return
        try:
            child.send_signal(sig)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGINT, forward)  # handled, not ignored: the command starts with the default
    signal.signal(signal.SIGTERM, forward)
    die_with_parent(signal.SIGTERM)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})  # pending ones arrive now
    child = spawn(cmd)  # dies with this reaper
    for sig in pending:
        child.send_signal(sig)
    while True:
        try:
            rc = child.wait()
            break
        except InterruptedError:
            continue
    if orphaned or os.getppid() == 1:
        shutil.rmtree(scratch, ignore_errors=True)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(_reap(sys.argv[1:]))
