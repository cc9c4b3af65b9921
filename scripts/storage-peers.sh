#!/usr/bin/env bash
# Installs what the scale-out store tests run against :
# Debian's PostgreSQL server (a throwaway cluster per test run, started by the tests), the
# moto S3 server and Azure's Python SDK (which makes Azurite's containers) into
# target/peers/venv, and s3rver (which checks presigned signatures and expiry) and Azurite
# (Microsoft's Azure Blob Storage emulator) into target/peers/node_modules. Idempotent: a stamp file records what was
# installed, so a second run with the same pins does nothing. The tests find the peers
# through STOWAGE_PEERS_DIR (default target/peers) and PostgreSQL under /usr/lib/postgresql.
set -euo pipefail
cd "$(dirname "$0")/.."

PEERS_DIR="${STOWAGE_PEERS_DIR:-target/peers}"
NPM_PKGS=("s3rver@3.7.1" "azurite@3.37.0")
PIP_PKGS=("moto[server]==5.2.5" "azure-storage-blob==12.31.1")
STAMP_WANT="npm:${NPM_PKGS[*]} pip:${PIP_PKGS[*]}"

# PostgreSQL: initdb/pg_ctl/postgres from Debian's package (15.x on bookworm).
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  echo "installing postgresql (Debian package)"
  if [[ $(id -u) -ne 0 ]]; then
    echo "storage-peers: PostgreSQL is missing and this is not root; install Debian's 'postgresql' package" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
fi

mkdir -p "$PEERS_DIR"
if [[ -f "$PEERS_DIR/.storage-stamp" && "$(cat "$PEERS_DIR/.storage-stamp")" == "$STAMP_WANT" ]]; then
  echo "storage peers already installed in $PEERS_DIR"
  exit 0
fi

echo "installing npm storage peers into $PEERS_DIR"
[[ -f "$PEERS_DIR/package.json" ]] || echo '{"name":"stowage-peers","private":true}' > "$PEERS_DIR/package.json"
( cd "$PEERS_DIR" && npm install --no-audit --no-fund --loglevel=error "${NPM_PKGS[@]}" )

echo "installing Python storage peers into $PEERS_DIR/venv"
[[ -x "$PEERS_DIR/venv/bin/python" ]] || python3 -m venv "$PEERS_DIR/venv"
"$PEERS_DIR/venv/bin/pip" install --quiet --disable-pip-version-check "${PIP_PKGS[@]}"

echo "$STAMP_WANT" > "$PEERS_DIR/.storage-stamp"
