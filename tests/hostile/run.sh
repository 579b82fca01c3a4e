#!/usr/bin/env bash
# The hostile-traffic suite against a running worker:
#   tests/hostile/run.sh --port P [--host H] [--pid PID] [--scale ci|soak] [--request-timeout S]
#                        [--per-client-cap N] [--served-name NAME] [--only PHASE,...]
# (all options go to tests/hostile/hostile.py; --help lists them). Exit status 0 only when every
# check passed. Needs python3 with prometheus_client for the metrics phase (Debian:
# python3-prometheus-client, installed by scripts/setup.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
PY=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import prometheus_client.parser' 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
  echo "note: no python3 with prometheus_client; the metrics phase will fail (install python3-prometheus-client)" >&2
  PY=python3
fi
# 1,030 slow clients and the per-client cap check need descriptors
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
exec "$PY" "$here/hostile.py" "$@"
