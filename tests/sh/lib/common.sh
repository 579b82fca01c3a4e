# tests/sh/lib/common.sh: what the shell tests under tests/sh/ share. A library, never run:
# a test sources it near its top with
#     . "$(dirname "$0")/lib/common.sh"
# tests/run.sh runs tests/sh/*.sh only, so this file (one folder down) is never taken for a test.
#
# Sourcing it sets fail=0 and defines the functions below; it starts nothing, makes no folder
# and sets no trap. The functions read or set these variables of the sourcing test:
#   T     the temporary folder (vsr_tmpdir sets it; vsr_start_worker logs to $T/worker.log)
#   BIN   the vllm-srun binary (vsr_start_worker, vsr_router_tools)
#   SR, UP  vllm-sr and tests/openai_upstream (vsr_router_tools sets them; vsr_start_upstreams)
#   PORT  the worker's TCP port on 127.0.0.1 (vsr_start_worker)
#   pid   the worker's process id (vsr_start_worker sets it; vsr_stop_worker reads it)
#   fail  0, or 1 once bad has been called; a test ends with `exit $fail`

fail=0

# ok MESSAGE...: prints "ok   MESSAGE" (one passed check).
ok() { echo "ok   $*"; }

# bad MESSAGE...: prints "FAIL MESSAGE" and sets fail=1 (one failed check; the test goes on).
bad() { echo "FAIL $*"; fail=1; }

# vsr_tmpdir: sets T to a new temporary folder and traps EXIT to clean up: vsr_on_exit first,
# where the test defines it (a router test kills its router, whose pid may no longer be a job);
# then every background job of the test is killed (SIGKILL) and waited for; then T is removed.
# The exit status of the test is the one it exits with (the trap does not change it).
vsr_tmpdir() {
  T=$(mktemp -d)
  trap vsr_cleanup EXIT
}
vsr_cleanup() {
  if declare -F vsr_on_exit >/dev/null; then vsr_on_exit; fi
  kill -9 $(jobs -p) 2>/dev/null
  wait 2>/dev/null
  rm -rf "$T"
}

# vsr_need_built FILE...: exits the test with "FAIL FILE is not built" (status 1) unless every
# FILE is an executable (vllm-sr, tests/openai_upstream: built by `make all`).
vsr_need_built() {
  local f
  for f in "$@"; do
    [ -x "$f" ] || { echo "FAIL $f is not built"; exit 1; }
  done
}

# vsr_free_port [N]: prints a port P such that nothing listens on 127.0.0.1 at P, P+1, ..., P+N-1
# (N defaults to 1), found by trying to connect; up to 50 random picks, then the last pick as it is
# (the server started on it then says why it cannot listen). P is drawn from 20000 up to the
# kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768 by default), so that no outgoing
# connection of another test can take the port between the pick and the listen (seen once:
# "cannot listen on 127.0.0.1:33600").
vsr_free_port() {
  local n=${1:-1} p=0 i _ lo=20000 hi=32768 eph
  if read -r eph _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null && [ "$eph" -gt $((lo + 1000)) ]; then
    hi=$eph
  fi
  for _ in $(seq 50); do
    p=$((lo + RANDOM % (hi - lo - n)))
    for ((i = 0; i < n; i++)); do
      (exec 3<>"/dev/tcp/127.0.0.1/$((p + i))") 2>/dev/null && continue 2
    done
    break
  done
  echo "$p"
}

# vsr_wait_http [--unix-socket SOCK] [--pid PID [--log FILE]] URL [CODE [TRIES]]: asks URL (over
# SOCK when given) every 0.1 s until it answers HTTP CODE (default 200), at most TRIES times
# (default 600: a minute). Returns 0 once it does; 1 when the tries run out, or at once when
# PID is given and that process has ended (after printing FILE, when given: the server's log).
vsr_wait_http() {
  local sock=() wpid="" log="" url code tries _
  while :; do
    case "${1:-}" in
      --unix-socket) sock=(--unix-socket "$2"); shift 2;;
      --pid) wpid=$2; shift 2;;
      --log) log=$2; shift 2;;
      *) break;;
    esac
  done
  url=$1 code=${2:-200} tries=${3:-600}
  for _ in $(seq 1 "$tries"); do
    [ "$(curl -s "${sock[@]}" -o /dev/null -w '%{http_code}' "$url")" = "$code" ] && return 0
    if [ -n "$wpid" ] && ! kill -0 "$wpid" 2>/dev/null; then
      [ -n "$log" ] && cat "$log"
      return 1
    fi
    sleep 0.1
  done
  return 1
}

# vsr_start_worker SERVE-ARGS...: starts `$BIN serve SERVE-ARGS...` in the background, its
# stderr appended to $T/worker.log, sets pid, and waits (vsr_wait_http) until
# http://127.0.0.1:$PORT/health answers 200: SERVE-ARGS must hold --port "$PORT". Returns 0
# when the worker is ready; 1 when it is not within a minute, or has exited (its log printed).
vsr_start_worker() {
  "$BIN" serve "$@" 2>>"$T/worker.log" &
  pid=$!
  vsr_wait_http --pid "$pid" --log "$T/worker.log" "http://127.0.0.1:$PORT/health"
}

# vsr_stop_worker: SIGTERM to the worker $pid and waits for it; returns its exit status.
vsr_stop_worker() {
  kill -TERM "$pid"
  wait "$pid"
}

# vsr_router_tools: sets SR to vllm-sr and UP to tests/openai_upstream, both in the build folder
# of $BIN, and exits the test (vsr_need_built) unless both are built.
vsr_router_tools() {
  SR=$(dirname "$BIN")/vllm-sr
  UP=$(dirname "$BIN")/tests/openai_upstream
  vsr_need_built "$SR" "$UP"
}

# vsr_start_upstreams "NAME..." [ARGS...]: starts one OpenAI-compatible upstream ($UP) per NAME
# in the background, each `$UP --name NAME --port 0 --port-file $T/port-NAME ARGS...` with its
# output in $T/up-NAME.log, and waits up to 5 s until every one has written the port it listens
# on to $T/port-NAME (read it with $(cat "$T/port-NAME")). Returns 1 when one has not.
vsr_start_upstreams() {
  local names=$1 n all _
  shift
  for n in $names; do
    "$UP" --name "$n" --port 0 --port-file "$T/port-$n" "$@" > "$T/up-$n.log" 2>&1 &
  done
  for _ in $(seq 100); do
    all=1
    for n in $names; do [ -s "$T/port-$n" ] || all=0; done
    [ $all = 1 ] && return 0
    sleep 0.05
  done
  return 1
}
