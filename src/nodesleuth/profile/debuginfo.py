"""Where a mapped file's symbols are read from: the first file with a .symtab among the debug files
perf looks at (.gnu_debuglink targets, /usr/lib/debug/PATH[.debug], /usr/lib/debug/.build-id/xx/yyyy.debug),
all with the file's build-id."""

from __future__ import annotations

import os
import struct

from .elf import Elf


def _candidates(path: str, root: str, link: str | None, bid: bytes | None) -> list[str]:
    """Where perf looks for a .symtab, in its order (binary_type_symtab), the file itself last."""
    d = os.path.dirname(path)
    out = []
    if link:
        out += [os.path.join(d, link), os.path.join(d, ".debug", link), "/usr/lib/debug" + os.path.join(d, link)]
    out += ["/usr/lib/debug" + path + ".debug", "/usr/lib/debug" + path]
    if bid:
        h = bid.hex()
        out.append(f"/usr/lib/debug/.build-id/{h[:2]}/{h[2:]}.debug")
    return [root + p for p in out]



def symbol_file(path: str, root: str, run: Elf, bid: bytes | None) -> Elf | None:
    """The open debug file with the symbols of `run` (mapped as `path`), None: the file itself has them if any."""
    for cand in _candidates(path, root, run.debuglink(), bid):
        try:
            if not os.path.isfile(cand):
                continue
            e = Elf(cand)
        except (OSError, ValueError, struct.error):
            continue
        if bid is not None and e.build_id() != bid or not e.has_symtab():
            e.close()
            continue
        return e
    return None
