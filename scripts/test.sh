#!/usr/bin/env bash
# The whole test suite: every crate's unit and integration tests under nextest (with
# a per-test timeout, see .config/nextest.toml), then the doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the tests need beyond Rust (nats-server, nats-py, the npm protocol clients);
# quick when all is there.
bash scripts/setup.sh

if command -v cargo-nextest >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-tests=fail
else
  cargo test --workspace --locked --lib --bins --tests
fi
cargo test --workspace --locked --doc

# The cross-node trace picture in docs/observability.md is drawn from spans a test
# captured; the drawing script must still draw exactly the committed picture.
python3 scripts/trace_picture.py --check --rows 10 \
  docs/images/cross-node-trace.json docs/images/cross-node-trace.svg
