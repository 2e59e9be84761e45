"""C++ and Rust legacy symbol names demangled as perf 6.1 prints them (`c++filt -p`, as perf's
demangler is called; Rust legacy hashes cut), when a stack first uses them."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading


class Demangler:
    """C++ (and Rust legacy) names as perf 6.1 prints them: `c++filt -p` (libiberty without
    DMGL_PARAMS, perf's flags), a Rust legacy hash cut. A long-lived c++filt started with a
    parent-death signal; names are demangled when a stack first uses them (most symbols never are)."""

    RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
    # names kept demangled: a node's new builds and programs bring new names all day; past this the
    # cache starts over (a name asked again is demangled again)
    LIMIT = 50_000

    def __init__(self):
        self.cache: dict[str, str] = {}
        self.proc = None
        self.lock = threading.Lock()
        self.missing = shutil.which("c++filt") is None

    def lazy_plt(self, name: str) -> str:
        return Lazy(name, self, "@plt") if name.startswith("_Z") else name + "@plt"

    def many(self, names: list[str], chunk: int = 400) -> list[str]:
        """Names demangled in bulk (a table's aliases): each chunk's lines written by a thread of its
        own while this one reads the answers. Written first and read after, a chunk of long C++ names
        (a browser's, kilobytes each) filled both pipes: c++filt blocked writing its answers, this
        process blocked writing the rest of the names, and the profiler stopped for good (3 recorders
        on this host at once, in the soak of issue 38)."""
        out = []
        if len(self.cache) > self.LIMIT:
            self.cache = {}
        todo = [n for n in names if n not in self.cache]
        for i in range(0, len(todo), chunk):
            part = todo[i:i + chunk]
            got = list(part)
            if not self.missing:
                try:
                    with self.lock:
                        self._ensure()
                        got = self._exchange(part)
                except (OSError, ValueError):
                    self.missing = True
            for n, d in zip(part, got):
                if d != n and self.RUST_HASH.search(d):
                    d = _rust_legacy(self.RUST_HASH.sub("", d))
                self.cache[n] = d
        return [self.cache.get(n, n) for n in names] if names else out

    def _exchange(self, part: list[str]) -> list[str]:
        proc = self.proc
        text = "".join(n.replace("\n", " ") + "\n" for n in part)
        failed: list[BaseException] = []

        def feed():
            try:
                proc.stdin.write(text)
                proc.stdin.flush()
            except (OSError, ValueError) as e:
                failed.append(e)

        writer = threading.Thread(target=feed, name="nodesleuth-c++filt-in", daemon=True)
        writer.start()
        got = []
        for n in part:
            ln = proc.stdout.readline()
            if not ln:  # c++filt gone: what is left stays mangled
                failed.append(EOFError())
                break
            got.append(ln.rstrip("\n") or n)
        writer.join()
        if failed:
            raise OSError("c++filt stopped answering")
        return got

    def _ensure(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            from ..node.children import spawn

            self.proc = spawn(["c++filt", "-p"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def __call__(self, name: str) -> str:
        got = self.cache.get(name)
        if got is not None:
            return got
        out = name
        if not self.missing:
            try:
                with self.lock:
                    self._ensure()
                    self.proc.stdin.write(name.replace("\n", " ") + "\n")
                    self.proc.stdin.flush()
                    out = self.proc.stdout.readline().rstrip("\n") or name
            except (OSError, ValueError):
                self.missing = True
        if out != name and self.RUST_HASH.search(out):
            out = _rust_legacy(self.RUST_HASH.sub("", out))
        if len(self.cache) > self.LIMIT:
            self.cache = {}
        self.cache[name] = out
        return out

    def close(self) -> None:
        with self.lock:
            if self.proc is not None:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
                self.proc.kill()
                self.proc.wait()
                self.proc.stdout.close()
                self.proc = None


class Lazy(str):
    """A mangled name in a symbol table, demangled (plus `suffix`) by resolve() when a stack uses it."""

    def __new__(cls, name: str, dm: Demangler, suffix: str = ""):
        s = super().__new__(cls, name)
        s.dm, s.suffix = dm, suffix
        return s

    def resolve(self) -> str:
        return self.dm(str.__str__(self)) + self.suffix


_RUST_ESC = {"$SP$": "@", "$BP$": "*", "$RF$": "&", "$LT$": "<", "$GT$": ">", "$LP$": "(", "$RP$": ")",
             "$C$": ",", "$u7e$": "~", "$u20$": " ", "$u27$": "'", "$u5b$": "[", "$u5d$": "]", "$u7b$": "{",
             "$u7d$": "}", "$u3b$": ";", "$u2b$": "+", "$u22$": '"'}


def _rust_legacy(s: str) -> str:
    s = s.replace("..", "::")
    for k, v in _RUST_ESC.items():
        s = s.replace(k, v)
    return s


def named(name) -> str:
    return name.resolve() if isinstance(name, Lazy) else name
