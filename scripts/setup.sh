#!/usr/bin/env bash
# Installs what the test suite needs beyond the Rust toolchain. Idempotent; safe to
# run on a fresh machine and on a developer's machine.
set -euo pipefail

need_apt=()
command -v nats-server >/dev/null 2>&1 || need_apt+=(nats-server)

if ((${#need_apt[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing ${need_apt[*]}; run as root or install them" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi
