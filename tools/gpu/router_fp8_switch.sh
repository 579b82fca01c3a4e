#!/bin/bash
# tools/gpu/router_fp8_switch.sh: issue 21, "a deployment switched from BF16 to FP8 this way
# (SIGHUP) keeps serving throughout", on a GPU that runs FP8 (the H200; the CPU refuses FP8).
#
#   tools/gpu/router_fp8_switch.sh build-router [DIR]   (here) puts vllm-sr into DIR (default .gpuw)
#       beside the CUDA vllm-srun that `bash tools/gpu/worker_run.sh build` writes there: the
#       router itself runs no model, so it is linked from a CPU build (GPU_BUILD, default
#       build-gpusr) with the host libraries static where they can be and the rest carried in
#       DIR/lib (as worker_run.sh does for vllm-srun). The supervisor starts the vllm-srun that
#       sits beside vllm-sr.
#   tools/gpu/router_fp8_switch.sh DIR           (the GPU machine, repository root, DIR carried)
#       -> $OUT/ (default /tmp/out): router_fp8_switch.txt (the summary), router.log, the worker
#       logs, results.txt (one line per request).
#
# What the run does:
#  1. writes a BF16 Decision 3.0 fixture (--size FP8SW_SIZE, default lite) and quantizes it with
#     `vllm-srun quantize --scheme fp8-dynamic` (timed); both are used as local paths (artifact:
#     an absolute path, no revision);
#  2. `vllm-sr serve --config` with one managed deployment d3 on FP8SW_DEVICE (default cuda:0)
#     whose artifact is the BF16 package; the worker's /v1/models (over its Unix socket, named
#     in its log) must report the BF16 package's model_sha256;
#  3. FP8SW_CLIENTS (default 4) clients send POST /v1/decisions to the router without pause;
#  4. after FP8SW_LOAD_S seconds (default 5) the config's artifact becomes the FP8 package and
#     the router gets SIGHUP; the script waits (at most FP8SW_SWITCH_TIMEOUT_S, default 180) until
#     the new worker's /v1/models reports the FP8 package's model_sha256 (ready) and the old
#     worker has exited, then keeps the load FP8SW_LOAD_S seconds more;
#  5. checks: every request answered 200 (none lost, none failed at the transport level); the
#     identities before/after; the router log's reload line; requests ran before, during and
#     after the switch; answers given after the old worker exited are the FP8 model's (each
#     answer is attributed by its probability: the two packages answer the probe differently);
#     SIGTERM ends the router with exit 0 and no worker left.
#  Prints a summary (requests, errors, switch time, identity and memory before/after) and exits
#  non-zero on any failed check.
#
# A dry run on the CPU (no FP8 there; the switch goes to a second BF16 package, seed 2, while
# the quantize step still runs):
#   FP8SW_DEVICE=cpu FP8SW_SECOND=bf16 FP8SW_SIZE=small tools/gpu/router_fp8_switch.sh build   (a CPU build dir)
# FP8SW_SECOND=fp8 on the CPU shows the other side: the FP8 worker is refused (the reason is in
# its log), the switch never completes, the BF16 worker keeps answering, the script fails.
set -u
cd "$(dirname "$0")/../.."

if [ "${1:-}" = build-router ]; then
  set -e
  G=${2:-.gpuw}
  BUILD=${GPU_BUILD:-build-gpusr}
  make -j2 BUILD="$BUILD" VSR_NO_CUDA=1 "$BUILD/libvsr.a" \
    $(ls tools/vllm-sr/*.c tools/common/*.c | sed "s|^|$BUILD/|; s|\.c$|.o|") >/dev/null
  mkdir -p "$G/lib"
  STATIC="-Wl,-Bstatic -ljansson -lpcre2-8 -lutf8proc -lyaml -lpng -lcrypto -Wl,-Bdynamic"
  cc -O2 -pthread -o "$G/vllm-sr" "$BUILD"/tools/vllm-sr/*.o "$BUILD"/tools/common/*.o "$BUILD/libvsr.a" $STATIC \
    -lmicrohttpd -lcurl -lz -ldl -lm -pthread -Wl,-rpath,\$ORIGIN/lib
  for l in $(ldd "$G/vllm-sr" | awk '/=>/ {print $3}' | grep -vE 'libc\.so|libm\.so|libpthread|libdl|librt|libresolv|ld-linux|libstdc|libgcc'); do
    case "$l" in "$PWD/$G"/*|"$G"/*) continue ;; esac
    cp -L "$l" "$G/lib/"
  done
  strip "$G/vllm-sr"
  case "$G" in /*) ;; *) ex=$(git rev-parse --git-path info/exclude 2>/dev/null) && { grep -qx "/$G/" "$ex" 2>/dev/null || echo "/$G/" >> "$ex"; } ;; esac
  [ -f "$G/build_root" ] || pwd > "$G/build_root"
  [ -x "$G/vllm-srun" ] || echo "note: $G/vllm-srun is missing: bash tools/gpu/worker_run.sh build (it writes .gpuw/)"
  ls -la "$G" "$G/lib"
  exit 0
fi

D=${1:?usage: tools/gpu/router_fp8_switch.sh DIR (vllm-srun and vllm-sr in DIR) | build-router [DIR]}
D=$(cd "$D" && pwd)
B=$D/vllm-srun
SR=$D/vllm-sr
DEVICE=${FP8SW_DEVICE:-cuda:0}
SECOND=${FP8SW_SECOND:-fp8}
SIZE=${FP8SW_SIZE:-lite}
CLIENTS=${FP8SW_CLIENTS:-4}
LOAD_S=${FP8SW_LOAD_S:-5}
SWITCH_TIMEOUT_S=${FP8SW_SWITCH_TIMEOUT_S:-180}
READY_TIMEOUT_S=${FP8SW_READY_TIMEOUT_S:-300}
case "$SECOND" in fp8|bf16) ;; *) echo "FP8SW_SECOND must be fp8 or bf16 (found '$SECOND')" >&2; exit 2 ;; esac
for x in "$B" "$SR"; do [ -x "$x" ] || { echo "FAIL $x is missing (build: tools/gpu/worker_run.sh build; tools/gpu/router_fp8_switch.sh build-router)" >&2; exit 2; }; done
if [ "$DEVICE" != cpu ]; then . tools/gpu/cuda_env.sh; fi   # $OUT, cuBLASLt on the library path, the data dir
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d "$D/lib" ] && export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}"
if [ -f "$D/build_root" ]; then   # the data dir compiled in (see cuda_env.sh), for DIR names it does not cover
  _root=$(cat "$D/build_root")
  if [ -n "$_root" ] && [ ! -e "$_root/data" ] && [ "$_root" != "$PWD" ]; then mkdir -p "$(dirname "$_root")" && ln -sfn "$PWD" "$_root"; fi
fi
export VSR_NO_PROGRESS=1
W=$(mktemp -d /tmp/fp8sw.XXXXXX)
RPID=
SUM=$OUT/router_fp8_switch.txt
: > "$SUM"
fail=0
say() { echo "$*" | tee -a "$SUM"; }
ok() { say "ok   $*"; }
bad() { say "FAIL $*"; fail=1; }
ms() { echo $(( $(date +%s%N) / 1000000 )); }
save_logs() {
  cp "$W/router.log" "$OUT/router.log" 2>/dev/null
  for f in "$W"/state/logs/*.log; do [ -f "$f" ] && cp "$f" "$OUT/worker-$(basename "$f")"; done
  [ -f "$W/results" ] && cp "$W/results" "$OUT/results.txt"
}
cleanup() {
  touch "$W/stop" 2>/dev/null
  for p in $(jobs -p); do kill "$p" 2>/dev/null; done
  [ -n "$RPID" ] && kill -TERM "$RPID" 2>/dev/null && sleep 2 && kill -9 "$RPID" 2>/dev/null
  wait 2>/dev/null
  save_logs
  [ "${FP8SW_KEEP:-0}" = 1 ] && echo "kept $W" || rm -rf "$W"
}
trap cleanup EXIT
die() { bad "$*"; exit 1; }

say "== router_fp8_switch: device $DEVICE, size $SIZE, second package $SECOND, $CLIENTS clients, $(date -u +%FT%TZ)"
"$B" devices > "$W/devices.txt" 2>&1; say "devices: $(tr -s ' \n' ' ' < "$W/devices.txt" | head -c 300)"

# ---- 1. the packages ----
t0=$(ms)
"$B" fixture "$W/d3-bf16" --family decision3 --size "$SIZE" --scheme bf16 --seed 1 > "$W/fixture.log" 2>&1 \
  || die "fixture: $(tail -3 "$W/fixture.log")"
t1=$(ms)
"$B" quantize "$W/d3-bf16" "$W/d3-fp8" --scheme fp8-dynamic > "$W/quantize.log" 2>&1 || die "quantize: $(tail -5 "$W/quantize.log")"
t2=$(ms)
say "BF16 fixture ($SIZE) $(( t1 - t0 )) ms; quantize --scheme fp8-dynamic $(( t2 - t1 )) ms; $(du -sh "$W/d3-bf16" | cut -f1) -> $(du -sh "$W/d3-fp8" | cut -f1)"
if [ "$SECOND" = fp8 ]; then SECOND_PKG=$W/d3-fp8
else
  SECOND_PKG=$W/d3-bf16-seed2
  "$B" fixture "$SECOND_PKG" --family decision3 --size "$SIZE" --scheme bf16 --seed 2 > "$W/fixture2.log" 2>&1 \
    || die "fixture seed 2: $(tail -3 "$W/fixture2.log")"
fi
ident() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1] + "/MODEL_MANIFEST.json"))["identity"]["model_sha256"])' "$1"; }
SHA1=$(ident "$W/d3-bf16") || die "no identity in $W/d3-bf16/MODEL_MANIFEST.json"
SHA2=$(ident "$SECOND_PKG") || die "no identity in $SECOND_PKG/MODEL_MANIFEST.json"
[ "$SHA1" != "$SHA2" ] || die "the two packages have the same model_sha256 $SHA1"
say "identities: BF16 $SHA1, second ($SECOND) $SHA2"

# ---- 2. the router with one managed deployment ----
RP=$((20000 + RANDOM % 20000))
for _ in $(seq 20); do curl -s -o /dev/null "http://127.0.0.1:$RP/" || break; RP=$((20000 + RANDOM % 20000)); done
R=http://127.0.0.1:$RP
config() { # artifact
  cat > "$W/r.yaml" <<EOF
global:
  model_catalog:
    signal_timeout_ms: 60000
    deployments:
      d3:
        provider: model_runtime
        artifact: $1
        device: $DEVICE
    system:
      decision_model: {deployment: d3}
EOF
}
config "$W/d3-bf16"
"$SR" validate "$W/r.yaml" > "$W/validate.txt" 2>&1 || die "the config does not validate: $(cat "$W/validate.txt")"
"$SR" serve --config "$W/r.yaml" --port "$RP" --state-dir "$W/state" --grace-s 30 --log-level info > "$W/router.log" 2>&1 &
RPID=$!
t0=$(ms)
while [ $(( $(ms) - t0 )) -lt $((READY_TIMEOUT_S * 1000)) ]; do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$R/ready")" = 200 ] && break
  kill -0 "$RPID" 2>/dev/null || break
  sleep 0.2
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "$R/ready")" = 200 ] \
  || die "the router was not ready in ${READY_TIMEOUT_S} s: $(tail -5 "$W/router.log"; tail -5 "$W"/state/logs/d3-0.log 2>/dev/null)"
say "router and the BF16 worker ready in $(( $(ms) - t0 )) ms"

# The socket of the newest start of replica 0, from its log ("---- vllm-sr: starting replica 0 of d3: ... --uds PATH ...").
sock_now() { grep -- '---- vllm-sr: starting replica 0 of d3:' "$W/state/logs/d3-0.log" 2>/dev/null | tail -1 | sed 's/.* --uds \([^ ]*\).*/\1/'; }
# card SOCK -> "model_sha256 scheme format device status memory_bytes" of the worker's only model
card() {
  curl -s --max-time 5 --unix-socket "$1" http://w/v1/models 2>/dev/null | python3 -c '
import json, sys
c = json.load(sys.stdin)["data"][0]
q = c.get("quantization") or {}
print(c.get("model_sha256"), q.get("scheme"), q.get("format"), c.get("device"), c.get("status"), c.get("memory_bytes"))' 2>/dev/null
}
worker_pids() { # the router's vllm-srun children (pgrep where there is one, else /proc)
  if command -v pgrep >/dev/null; then pgrep -P "$RPID" -f 'vllm-srun serve' | sort; return; fi
  local d pp
  for d in /proc/[0-9]*; do
    pp=$(sed 's/.*) [A-Za-z] \([0-9]*\).*/\1/' "$d/stat" 2>/dev/null) || continue
    [ "$pp" = "$RPID" ] && tr '\0' ' ' < "$d/cmdline" 2>/dev/null | grep -q 'vllm-srun serve' && echo "${d#/proc/}"
  done | sort
}
SOCK1=$(sock_now)
CARD1=$(card "$SOCK1")
set -- $CARD1
if [ "${1:-}" = "$SHA1" ] && [ "${5:-}" = ready ] && [ "${4:-}" = "$DEVICE" ]; then
  ok "before: the worker on $SOCK1 serves the BF16 package (model_sha256 $1, scheme $2, device $4, $6 bytes)"
else bad "before: the worker's /v1/models says '$CARD1' (want $SHA1 ready on $DEVICE)"; fi
MEM1=${6:-?}; SCHEME1=${2:-?}
PIDS1=$(worker_pids)
[ "$(echo "$PIDS1" | grep -c .)" = 1 ] || bad "want one worker, found: $(echo $PIDS1)"

# ---- 3. load ----
REQ='{"state":"Write a Python function that merges two sorted lists and explain its running time.","questions":{"domain":{"type":"choice","instructions":"Which domain does this request belong to?","criteria":{"code":"Programming","other":"Anything else"}}}}'
probe() { curl -s --max-time 60 "$R/v1/decisions" -d "$REQ" | grep -o '"code":[-0-9.eE+]*' | head -1 | cut -d: -f2; }
P1=$(probe)
[ -n "$P1" ] || die "the probe is not answered: $(curl -s "$R/v1/decisions" -d "$REQ")"
client() { # id
  while [ ! -e "$W/stop" ]; do
    local t0c code p
    t0c=$(date +%s%N)
    code=$(curl -s --max-time 120 -o "$W/c$1.b" -w '%{http_code}' "$R/v1/decisions" -d "$REQ")
    p=$(grep -o '"code":[-0-9.eE+]*' "$W/c$1.b" 2>/dev/null | head -1 | cut -d: -f2)
    if [ "$code" != 200 ]; then p="ERR:$(head -c 200 "$W/c$1.b" 2>/dev/null | tr ' \n' '_ ')"; fi
    echo "$t0c $(date +%s%N) $1 $code ${p:--}" >> "$W/results"
  done
}
: > "$W/results"
for c in $(seq "$CLIENTS"); do client "$c" & done
sleep "$LOAD_S"

# ---- 4. SIGHUP to the FP8 package ----
config "$SECOND_PKG"
T_HUP=$(date +%s%N)
kill -HUP "$RPID"
T_NEW=; T_OLD=
while [ $(( ($(date +%s%N) - T_HUP) / 1000000 )) -lt $((SWITCH_TIMEOUT_S * 1000)) ]; do
  if [ -z "$T_NEW" ]; then
    s=$(sock_now)
    if [ -n "$s" ] && [ "$s" != "$SOCK1" ]; then
      set -- $(card "$s")
      [ "${1:-}" = "$SHA2" ] && [ "${5:-}" = ready ] && T_NEW=$(date +%s%N)
    fi
  fi
  if [ -n "$T_NEW" ] && [ -z "$T_OLD" ]; then
    gone=1; for p in $PIDS1; do kill -0 "$p" 2>/dev/null && gone=0; done
    [ $gone = 1 ] && T_OLD=$(date +%s%N)
  fi
  [ -n "$T_OLD" ] && break
  kill -0 "$RPID" 2>/dev/null || break
  sleep 0.2
done
if [ -n "$T_NEW" ] && [ -n "$T_OLD" ]; then
  ok "switch: the new worker ready $(( (T_NEW - T_HUP) / 1000000 )) ms after SIGHUP; the old one exited $(( (T_OLD - T_HUP) / 1000000 )) ms after SIGHUP"
else
  bad "switch not completed in ${SWITCH_TIMEOUT_S} s (new ready: ${T_NEW:-no}, old gone: ${T_OLD:-no}); router: $(grep -E 'reload|replica|refus|error' "$W/router.log" | tail -4 | tr '\n' ' '); worker: $(tail -3 "$W/state/logs/d3-0.log" | tr '\n' ' ')"
fi
grep -q 'SIGHUP: applied' "$W/router.log" && grep -q 'reload: 0 replica(s) kept, 1 started, 1 retired' "$W/router.log" \
  && ok "router log: SIGHUP applied; reload: 0 kept, 1 started, 1 retired" || bad "router log: $(grep -E 'SIGHUP|reload' "$W/router.log" | tail -3 | tr '\n' ' ')"
sleep "$LOAD_S"
touch "$W/stop"
for p in $(jobs -p); do [ "$p" = "$RPID" ] || wait "$p" 2>/dev/null; done

# ---- 5. after ----
SOCK2=$(sock_now)
CARD2=$(card "$SOCK2")
set -- $CARD2
if [ -n "$T_NEW" ] && [ "${1:-}" = "$SHA2" ] && [ "${5:-}" = ready ] && [ "${4:-}" = "$DEVICE" ] \
   && { [ "$SECOND" != fp8 ] || [ "${2:-}" = fp8 ]; }; then
  ok "after: the worker on $SOCK2 serves the $SECOND package (model_sha256 $1, scheme $2, format $3, device $4, $6 bytes)"
else bad "after: the worker's /v1/models says '$CARD2' (want $SHA2 ready on $DEVICE, scheme fp8 when switching to FP8)"; fi
MEM2=${6:-?}; SCHEME2=${2:-?}
P2=$(probe)
python3 - "$W/results" "$T_HUP" "${T_NEW:-0}" "${T_OLD:-0}" "$P1" "${P2:-nan}" > "$W/analysis.txt" <<'EOF'
import sys
path, t_hup, t_new, t_old = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
p1, p2 = float(sys.argv[5]), float(sys.argv[6])
rows = [l.split(" ", 4) for l in open(path) if l.strip()]
tol = 1e-6 + 1e-4 * max(abs(p1), abs(p2))
distinct = abs(p1 - p2) > 20 * tol
n = len(rows); n200 = sum(r[3] == "200" for r in rows); transport = sum(r[3] == "000" for r in rows)
lat = sorted((int(r[1]) - int(r[0])) / 1e6 for r in rows)
def phase(r):
    t0 = int(r[0])
    if t0 < t_hup: return "before"
    if t_old and t0 >= t_old: return "after"
    return "during"
count = {"before": 0, "during": 0, "after": 0}
by = {k: {"bf16": 0, "second": 0, "other": 0} for k in count}
for r in rows:
    ph = phase(r); count[ph] += 1
    if r[3] != "200": continue
    try: p = float(r[4])
    except ValueError: by[ph]["other"] += 1; continue
    # the nearer reference, when it is near: within tol, or (the two apart) a quarter of their gap
    d1, d2 = abs(p - p1), abs(p - p2)
    near = max(tol, 0.25 * abs(p1 - p2)) if distinct else tol
    k = ("bf16" if d1 <= d2 else "second") if min(d1, d2) <= near else "other"
    by[ph][k] += 1
pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")
print(f"requests {n} answered_200 {n200} errors {n - n200} transport {transport}")
print(f"phases before {count['before']} during {count['during']} after {count['after']}")
print(f"latency_ms p50 {pct(0.5):.1f} p99 {pct(0.99):.1f} max {lat[-1] if lat else float('nan'):.1f}")
print(f"probe code probability: BF16 {p1!r}, second {p2!r}, distinguishable {distinct}")
for k in ("before", "during", "after"):
    print(f"answers {k}: bf16 {by[k]['bf16']} second {by[k]['second']} other {by[k]['other']}")
ok = n200 == n and n > 0 and transport == 0 and count["before"] >= 3 and count["after"] >= 3
if distinct:
    ok = ok and by["before"]["second"] == 0 and by["after"]["bf16"] == 0 and by["after"]["second"] > 0
print("verdict", "ok" if ok else "FAIL")
EOF
cat "$W/analysis.txt" >> "$SUM"
read -r _ NREQ _ N200 _ NERR _ NTRANS < <(sed -n 1p "$W/analysis.txt")
grep -q '^verdict ok' "$W/analysis.txt" \
  && ok "load: $NREQ requests, $N200 answered 200, $NERR errors, $NTRANS transport failures; $(sed -n 2p "$W/analysis.txt")" \
  || bad "load: $(tr '\n' ';' < "$W/analysis.txt")"
awk '$4 != 200' "$W/results" | head -5 | while read -r l; do say "  error: $l"; done

# ---- SIGTERM ----
ALL=$(worker_pids)
kill -TERM "$RPID"; wait "$RPID"; rc=$?; RPID=
left=""; for p in $ALL; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
[ $rc = 0 ] && [ -z "$left" ] && ok "SIGTERM: router exit 0, no worker left" || bad "SIGTERM: rc $rc, left:$left"

say "== summary"
say "requests $NREQ, answered 200: $N200, errors: $NERR (transport $NTRANS)"
say "switch: new worker ready $([ -n "$T_NEW" ] && echo "$(( (T_NEW - T_HUP) / 1000000 )) ms" || echo never) after SIGHUP, old worker exited $([ -n "$T_OLD" ] && echo "$(( (T_OLD - T_HUP) / 1000000 )) ms" || echo never) after SIGHUP"
say "before: $SHA1 (scheme $SCHEME1, $MEM1 bytes on $DEVICE)"
say "after:  ${CARD2%% *} (scheme $SCHEME2, $MEM2 bytes on $DEVICE; want $SHA2)"
say "verdict: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
