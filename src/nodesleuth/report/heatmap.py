"""Terminal rendering of a subsecond heatmap (FlameScope layout) with wall-clock time labels, so a
column can be named in an incident channel ("10:41:03") instead of by its index."""

from __future__ import annotations

from datetime import datetime, timezone

from ..model.thresholds import HOT_BUSY

SHADES = " .:-=+*#%@"
LABEL_EVERY = 10  # columns (seconds) between time labels; an HH:MM:SS label is 8 characters


def _hms(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S")


def render_text(h) -> str:
    """Rows = subsecond offsets (top = end of the second), one character per second; a time label
    (UTC) above every 10th second with a tick under it, and the hot CPUs listed by wall-clock time."""
    n = len(h.columns)
    st = getattr(h, "step", 1)  # seconds per column
    per = "second" if st == 1 else f"{st} seconds"
    pad = " " * 8  # width of the "NNNNms |" row prefix
    labels, ticks = [" "] * (n + LABEL_EVERY), [" "] * n
    for c in range(0, n, LABEL_EVERY):
        for i, ch in enumerate(_hms(h.start + c * st)):
            labels[c + i] = ch
        ticks[c] = "|"
    day = datetime.fromtimestamp(h.start, timezone.utc).strftime("%Y-%m-%d")
    out = [f"subsecond heatmap, {day} UTC, one column per {per} from {_hms(h.start)}, "
           f"rows = offset within the second; {'CPUs ' + ','.join(map(str, h.cpus)) if h.cpus else 'all CPUs'}, "
           f"darkest = {h.maxvalue} samples",
           pad + "".join(labels).rstrip(), pad + "".join(ticks).rstrip()]
    for r in range(h.rows):
        line = "".join(SHADES[min(9, int(9 * col[r] / h.maxvalue))] if h.maxvalue else " " for col in h.values)
        out.append(f"{1000 - (r + 1) * 1000 // h.rows:>4}ms |{line}|")
    out.append(pad + "".join(ticks).rstrip())
    out.append(pad + "".join(labels).rstrip())
    hot = [f"{_hms(h.start + c * st)} CPU {','.join(map(str, hc))}" for c, hc in zip(h.columns, h.hot_cpus) if hc]
    out.append(f"hot CPUs (>= {HOT_BUSY:.0f}% busy) per {per}: " + ("; ".join(hot) if hot else "none"))
    return "\n".join(out) + "\n"
