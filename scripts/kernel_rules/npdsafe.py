"""Rewrite a Python-re pattern so that NPD (Go regexp, `pattern + \\z` matched against the last 10 log lines
joined by newlines) means the same as nodesleuth (Python re, one message): nothing in the pattern may match a
newline, and a start anchor means the start of a line."""

import re


def npd_safe(p: str) -> str:
    out = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "\\":
            e = p[i:i + 2]
            if e == "\\s":
                out.append(r"[^\S\n]")
            elif e == "\\W":
                out.append(r"[^\w\n]")
            elif e == "\\D":
                out.append(r"[^\d\n]")
            else:
                out.append(e)
            i += 2
            continue
        if c == "^":
            out.append("^" if "".join(out[-1:]).endswith("(?m:") or p[max(0, i - 4):i] == "(?m:" else "(?m:^)")
            i += 1
            continue
        if c == "[":
            j = i + 1
            neg = j < n and p[j] == "^"
            if neg:
                j += 1
            body = []
            if j < n and p[j] == "]":
                body.append("]")
                j += 1
            while j < n and p[j] != "]":
                if p[j] == "\\":
                    body.append(p[j:j + 2])
                    j += 2
                else:
                    body.append(p[j])
                    j += 1
            if j >= n:
                raise ValueError(f"unclosed class in {p!r}")
            if neg:
                if "\\n" not in body:
                    body.append("\\n")
            else:
                body = [" \\t\\r\\f\\v" if b == "\\s" else b for b in body]
                if any(b in ("\\W", "\\D", "\\S") for b in body):
                    raise ValueError(f"positive class with a newline-matching escape in {p!r}")
            out.append("[" + ("^" if neg else "") + "".join(body) + "]")
            i = j + 1
            continue
        out.append(c)
        i += 1
    r = "".join(out)
    re.compile(r)
    return r


if __name__ == "__main__":
    for t in [r".*\bfoo (?P<x>[^)]*) \s*$", r"^(?:\s*|.*(?:\]|kernel:|>|\")\s*)NETDEV", r"[\s:]+", r"[^\S\n]"]:
        print(t, "->", npd_safe(t))
