#!/usr/bin/env python3
"""Shows that moving CUDA code between files changed no kernel: the SASS of every function of two builds'
CUDA objects, compared function by function (a kernel may move to another object), and their resource usage.

  tools/gpu/sass_compare.py dump OUT.json build-a/src/backend/cuda/*.o     # once per build
  tools/gpu/sass_compare.py cmp BEFORE.json AFTER.json                      # exit 1 if any instruction differs
  tools/gpu/sass_compare.py ptxas BEFORE.log AFTER.log                      # nvcc -Xptxas -v logs: registers, spills

A build with the logs: make BUILD=build-x NVCCFLAGS="<the Makefile's NVCCFLAGS> -Xptxas -v" build-x/src/backend/cuda/X.o
2> log. Instructions and their encodings are compared with the addresses stripped; mangled names are kept (a
static or anonymous-namespace kernel that changes its name shows as "only before" / "only after").
cuobjdump: $CUOBJDUMP, else on PATH, else the CUDA toolkit's, else the one a triton wheel carries."""
import glob, json, os, re, shutil, subprocess, sys


def cuobjdump():
    for c in [os.environ.get('CUOBJDUMP'), shutil.which('cuobjdump'), '/usr/local/cuda/bin/cuobjdump'] + \
            sorted(glob.glob('/root/.pyenv/versions/*/lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump')) + \
            sorted(glob.glob('/usr/lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump')):
        if c and os.path.exists(c):
            return c
    sys.exit('sass_compare: no cuobjdump (set CUOBJDUMP)')


def dump(out, objs):
    tool = cuobjdump()
    funcs, res = {}, {}
    for o in objs:
        text = subprocess.run([tool, '--dump-sass', o], capture_output=True, text=True, check=True).stdout
        arch = cur = None
        for line in text.split('\n'):
            m = re.match(r'\s*code for (sm_\w+)', line)
            if m:
                arch, cur = m.group(1), None
                continue
            m = re.match(r'\s*Function : (\S+)', line)
            if m:
                key = arch + ' ' + m.group(1)
                if key in funcs:
                    sys.exit(f'sass_compare: {key} in both {funcs[key]["obj"]} and {o}')
                cur = funcs[key] = {'obj': os.path.basename(o), 'ins': [], 'enc': []}
                continue
            if cur is None:
                continue
            m = re.match(r'\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*/\* (0x[0-9a-f]+) \*/', line)
            if m:
                cur['ins'].append(m.group(1))
                cur['enc'].append(m.group(2))
                continue
            m = re.match(r'\s*/\* (0x[0-9a-f]+) \*/', line)
            if m and cur['enc']:
                cur['enc'][-1] += m.group(1)
        text = subprocess.run([tool, '--dump-resource-usage', o], capture_output=True, text=True, check=True).stdout
        arch = fn = None
        for line in text.split('\n'):
            m = re.match(r'.*arch = (sm_\w+)', line)
            if m:
                arch = m.group(1)
            m = re.match(r'\s*Function (\S+):', line)
            if m:
                fn = m.group(1)
                continue
            if fn and 'REG:' in line:
                res[arch + ' ' + fn] = line.strip()
                fn = None
    json.dump({'funcs': funcs, 'res': res}, open(out, 'w'))
    print(f'{len(funcs)} functions, {sum(len(f["ins"]) for f in funcs.values())} instructions, {len(res)} resource lines')


def cmp(a, b):
    A, B = json.load(open(a)), json.load(open(b))
    fa, fb = A['funcs'], B['funcs']
    common = sorted(set(fa) & set(fb))
    same = enc = diff = moved = 0
    for k in common:
        x, y = fa[k], fb[k]
        moved += x['obj'] != y['obj']
        if x['ins'] == y['ins'] and x['enc'] == y['enc']:
            same += 1
        elif x['ins'] == y['ins']:
            enc += 1
            print('ENCODINGS DIFFER', k, x['obj'], y['obj'])
        else:
            diff += 1
            print('INSTRUCTIONS DIFFER', k, x['obj'], y['obj'], len(x['ins']), len(y['ins']))
    rdiff = 0
    for k in sorted(set(A['res']) & set(B['res'])):
        if A['res'][k] != B['res'][k]:
            rdiff += 1
            print('RESOURCES DIFFER', k, fa.get(k, {}).get('obj'), '->', fb.get(k, {}).get('obj'), ':', A['res'][k], '|', B['res'][k])
    for k in sorted(set(fa) - set(fb)):
        print('ONLY BEFORE', k, fa[k]['obj'])
    for k in sorted(set(fb) - set(fa)):
        print('ONLY AFTER', k, fb[k]['obj'])
    print(f'functions compared {len(common)} ({moved} in another object): identical {same}, same instructions with other '
          f'encodings {enc}, differing {diff}; only before {len(set(fa) - set(fb))}, only after {len(set(fb) - set(fa))}; '
          f'resource usage differing {rdiff} of {len(set(A["res"]) & set(B["res"]))}')
    return 1 if diff or enc or set(fa) ^ set(fb) else 0


def ptxas(a, b):
    def parse(p):
        out, cur = {}, None
        for line in open(p, errors='replace'):
            m = re.search(r"Compiling entry function '(\S+)' for '(sm_\w+)'", line)
            if m:
                cur = m.group(2) + ' ' + m.group(1)
                out[cur] = {}
                continue
            m = re.search(r'(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads', line)
            if m and cur:
                out[cur]['stack/spill'] = m.groups()
            m = re.search(r'Used (\d+) registers', line)
            if m and cur:
                out[cur]['regs'] = m.group(1)
        return out
    x, y = parse(a), parse(b)
    common = set(x) & set(y)
    d = sorted(k for k in common if x[k] != y[k])
    for k in d:
        print('DIFFERS', k, x[k], y[k])
    print(f'ptxas entries: before {len(x)}, after {len(y)}, compared {len(common)}, registers/stack/spills differing {len(d)}')
    return 1 if d else 0


if __name__ == '__main__':
    if len(sys.argv) < 3 or sys.argv[1] not in ('dump', 'cmp', 'ptxas'):
        sys.exit(__doc__)
    if sys.argv[1] == 'dump':
        dump(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == 'cmp':
        sys.exit(cmp(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(ptxas(sys.argv[2], sys.argv[3]))
