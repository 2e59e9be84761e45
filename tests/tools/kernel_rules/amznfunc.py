import json, re, subprocess
A = json.load(open('/work/scratch/drivers/part-A.json'))
out = {}
for e in A:
    if e['function']:
        continue
    s = e['sources'][0]
    src = subprocess.run(['git', '--git-dir=/work/.mirror/amzn+amzn-drivers/repo', 'show', f"{s['commit']}:{s['path']}"],
                         capture_output=True, text=True).stdout.split('\n')
    lit = e['format'].split('%')[0].split('\n')[0][:30]
    func = None
    for i, ln in enumerate(src):
        if lit and lit in ln.replace('"\n', ''):
            for j in range(i, 0, -1):
                m = re.match(r'^(?:static\s+)?(?:[\w\s\*]+?)\b(\w+)\(', src[j])
                if m and not src[j].startswith((' ', '\t', '}', '#', '/')):
                    func = m.group(1); break
            line = i + 1
            break
    out[e['format']] = (func, line if func else None)
    print(repr(e['format'][:50]), func, line if func else None, s['commit'][:10])
json.dump(out, open('/work/scratch/kernlog/amzn_funcs.json', 'w'), indent=1)
