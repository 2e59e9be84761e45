"""The path class of a printk: what the code around it says the line means. Read from the format's text (its words
outside "name: %x" / "name=%x" value pairs), the function it is printed in, and the code after it (a reset work
queued right after the print makes it the start of a reset).

Classes: reset_started, reset_done, reset_failed, tx_timeout, hang_detected, firmware_health, status_dump (a periodic
status, statistics or register dump, or the banner of one: it describes a state, it does not report an event)."""

from __future__ import annotations

import re

CLASSES = ("reset_started", "reset_done", "reset_failed", "tx_timeout", "hang_detected", "firmware_health",
           "status_dump")
_CONV = r"%[-+ #0]*\*?\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t|L)?(?:p[A-Za-z]{1,3}|[diouxXcsfeEgGaAn])"
# "key: %x", "key=%x", "key <%x>", "(key %u)": a value printed under a name (a dump's fields)
_PAIR = re.compile(r"[\w.\[\]>-]+(?: [a-z_]\w*)?(?:\s*[:=]\s*\(?(?:0x)?" + _CONV + r"\)?|\s+<(?:0x)?" + _CONV + r">)", re.I)
_DUMP_FUNC = re.compile(r"dump|_stats\b|stats64|cpustat|irq_counts|_show_|print_.*(?:info|state|regs|status)|"
                        r"_regs\b|debug_info", re.I)
_WORDS = {
    "reset_failed": r"(?:reset|recover(?:y|ing)?|restart|re-?init\w*|re-?open|reload)\b.*\b(?:fail\w*|unable|timed? ?out|"
                    r"error|not)\b|\b(?:fail\w*|unable|cannot|can't|could ?n[o']t|giving up)\b.*\b(?:reset|recover\w*|"
                    r"restart|re-?init\w*|reload)|reboot will be required|\bdisabl\w* (?:device|adapter)",
    "reset_done": r"(?:reset|recover\w*|restart\w*|re-?init\w*)\b.*\b(?:done|complete\w*|success\w*|finished|"
                  r"succeeded|ok)\b|\b(?:was|been|successfully) (?:reset|recovered|reinitialized)|recovered\b",
    "reset_started": r"\breset|\brecover|\brestart|re-?init|resetting|going to be reset|schedul\w* .*reset",
    "tx_timeout": r"\btx\w* ?time ?out|transmit\w* (?:queue (?:\S+ )?)?timed out|\btimed out\b.*\btx\b|watchdog|"
                  r"\btimeout\b",
    "hang_detected": r"\bhang|\bhung|stall|lockup|stuck|blocked|paused|not (?:in )?running|no (?:tx )?completion|"
                     r"missing|\blost\b|not respond|unresponsive|starv|timed out|\bbusy\b|polling",
    "firmware_health": r"firmware|\bfw\b|health|fatal|internal error|assert|syndrome|error state|\becc\b|parity|"
                       r"\bpanic|crash|\berror\b|\berr\b|fault|unrecoverable|abort|bad state|corrupt",
}
_KIND = {"tx_timeout": "tx_timeout", "watchdog": "tx_timeout", "hang": "hang_detected", "missing_tx": "hang_detected",
         "missing_interrupt": "hang_detected", "starvation": "hang_detected", "reset_start": "reset_started",
         "recovery": "reset_started", "reset": "reset_done", "reset_failed": "reset_failed",
         "soft_lockup": "hang_detected", "hard_lockup": "hang_detected", "rcu_stall": "hang_detected",
         "hung_task": "hang_detected", "workqueue_lockup": "hang_detected"}
_RESET_AFTER = re.compile(r"(?:queue|schedule)_(?:delayed_)?work\([^;]*reset|\w*reset\w*\(|RESET", re.I)


def text(fmt: str) -> str:
    """The words of a format outside its value pairs and conversions."""
    t = fmt.split(" (")[0] if fmt.count(" (<=") else fmt
    t = re.sub(r"^%s:%d:\(pid %d\): |^\[%s:%d\(%s\)\]", "", t)
    t = _PAIR.sub(" ", t)
    t = re.sub(_CONV + "|%%|\\\\n|\\\\t", " ", t)
    return re.sub(r"\s+", " ", t).strip()


def classify(fmt: dict, kind: str) -> str:
    """The class of one format entry (format, function, context) of a rule of this kind."""
    t = text(fmt["format"]).lower()
    full = re.sub(r"\s+", " ", re.sub(_CONV + "|%%|\\\\n|\\\\t", " ", fmt["format"])).lower()
    func = fmt.get("function") or ""
    dump_func = bool(_DUMP_FUNC.search(func))
    if re.search(r"\b(?:initiat|schedul|trigger|perform|start)\w* .*reset", t):
        return "reset_started"  # "Initiating reset due to tx timeout", "..., scheduling reset"
    if re.search(r"\bfail|unable", full) and re.search(r"reset|recover", func, re.I):
        return "reset_failed"  # "mana_detach failed: %d" in the reset worker
    for s in (t, full):
        for cls in ("reset_failed", "reset_done", "reset_started", "tx_timeout", "hang_detected", "firmware_health"):
            if re.search(_WORDS[cls], s) and not (dump_func and s is full):
                return cls
    if dump_func or not re.search(r"[a-z]{2,}", t) and "==" not in t or re.search(r"\bdump|status summary|-{3,}|<-+|register|\bregs\b", t):
        return "status_dump"
    code = (fmt.get("context") or {}).get("code") or []
    before = (fmt.get("context") or {}).get("before", 12)
    after = "\n".join(code[before + 1:])
    if after and _RESET_AFTER.search(after):
        return "reset_started"
    return _KIND.get(kind, "hang_detected")


# severity a rule of each class may carry (status dumps are informational: they never make a finding)
SEVERITY = {"reset_started": {"warning", "critical"}, "reset_done": {"warning", "critical"},
            "reset_failed": {"critical"}, "tx_timeout": {"warning", "critical"},
            "hang_detected": {"warning", "critical"}, "firmware_health": {"warning", "critical"},
            "status_dump": {"info"}}


def rule_class(classes: list[str]) -> str:
    """A rule's class: its formats' classes, the event over the dump (a rule that matches a dump line only when it
    also matches an event wording keeps the event's class)."""
    ev = [c for c in classes if c != "status_dump"]
    if not ev:
        return "status_dump"
    return min(ev, key=CLASSES.index) if "reset_failed" in ev and len(set(ev)) == 1 else ev[0]
