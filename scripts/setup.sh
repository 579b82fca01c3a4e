#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test vllm-sr-c.
# Idempotent: installs only missing packages. Needs root or sudo for apt.
set -euo pipefail
pkgs=(build-essential pkg-config libjansson-dev libssl-dev libpcre2-dev libutf8proc-dev
      libmicrohttpd-dev libyaml-dev curl ca-certificates python3 python3-jsonschema python3-yaml
      python3-prometheus-client clang libclang-rt-14-dev libpng-dev libcurl4-openssl-dev)
# python3-prometheus-client: tests/hostile parses /metrics with Prometheus' own text parser;
# clang + libclang-rt-14-dev (libFuzzer, sanitizers): the fuzz targets scripts/test.sh runs.
# libpng-dev: the histogram `vllm-srun compare --plot` writes (and tests/test_compare reads back).
# libcurl4-openssl-dev: the router's upstream calls (workers over Unix sockets, attached endpoints, backends).
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "setup: all build dependencies present"
fi
