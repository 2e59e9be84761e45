"""Month names (abbreviated, full, and alternative/genitive forms) of some locales, from glibc's locale sources
(/usr/share/i18n/locales, Debian 'locales' 2.36): the table kernlog.py uses to read localized dmesg -T stamps."""
import re, json, collections
LOCS = ["en_US", "de_DE", "fr_FR", "es_ES", "it_IT", "pt_BR", "pt_PT", "nl_NL", "sv_SE", "ru_RU", "uk_UA", "pl_PL",
        "cs_CZ", "hr_HR", "tr_TR", "ja_JP", "zh_CN", "zh_TW", "ko_KR"]
D = "/usr/share/i18n/locales/"


def lc_time(loc):
    text = open(D + loc, encoding="utf-8", errors="replace").read()
    esc = re.search(r"^escape_char\s+(\S)", text, re.M)
    esc = esc.group(1) if esc else "\\"
    m = re.search(r"^LC_TIME\s*$(.*?)^END LC_TIME", text, re.M | re.S)
    body = m.group(1)
    cp = re.search(r'^\s*copy\s+"([^"]+)"', body, re.M)
    if cp and not re.search(r"^\s*abmon", body, re.M):
        return lc_time(cp.group(1))
    body = body.replace(esc + "\n", "")
    out = {}
    for key in ("abmon", "mon", "ab_alt_mon", "alt_mon"):
        mm = re.search(r"^\s*" + key + r"\s+(.*)$", body, re.M)
        if mm:
            vals = re.findall(r'"([^"]*)"', mm.group(1))
            vals = [re.sub(r"<U([0-9A-Fa-f]+)>", lambda u: chr(int(u.group(1), 16)), v) for v in vals]
            if len(vals) == 12:
                out[key] = vals
    return out


table = collections.defaultdict(set)
for loc in LOCS:
    t = lc_time(loc)
    for key, vals in t.items():
        for i, v in enumerate(vals, 1):
            w = v.strip().lower().rstrip(".")
            if w and not re.fullmatch(r"\d+月|\d+월", w):
                table[w].add(i)
bad = {w: s for w, s in table.items() if len(s) > 1}
print("conflicts:", bad)
good = {w: next(iter(s)) for w, s in table.items() if len(s) == 1}
print(len(good))
print(json.dumps(dict(sorted(good.items(), key=lambda kv: (kv[1], kv[0]))), ensure_ascii=False))
