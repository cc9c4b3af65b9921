#!/usr/bin/env bash
# Installs what the browser tests drive (the playground's and the MCP Apps viewer's page tests):
# Debian's Chromium (Playwright's own browser download does not work offline), Playwright for
# Python into target/peers/venv, and the npm packages of the MCP Apps test host
# (crates/stowage/tests/peers/apps_host/: AppBridge from @modelcontextprotocol/ext-apps, bundled
# with esbuild at test time) into target/peers/node_modules. Idempotent: stamp files record what
# was installed, so a second run with the same pins does nothing. The tests find Chromium at
# /usr/bin/chromium (STOWAGE_CHROMIUM overrides), and Python and node_modules through
# STOWAGE_PEERS_DIR (default target/peers).
set -euo pipefail
cd "$(dirname "$0")/.."

PEERS_DIR="${STOWAGE_PEERS_DIR:-target/peers}"
PIP_PKGS=("playwright==1.65.2")
STAMP_WANT="pip:${PIP_PKGS[*]}"
# ext-apps' peer dependencies are pinned to the versions gateway-peers.sh's packages already
# resolve (the inspector's), so installing these moves nothing under the other peers.
NPM_PKGS=(
  "@modelcontextprotocol/ext-apps@2.0.4"
  "@modelcontextprotocol/client@2.3.1"
  "@modelcontextprotocol/core@2.3.1"
  "zod@4.6.7"
  "esbuild@0.28.2"
)
NPM_STAMP_WANT="npm:${NPM_PKGS[*]}"

if [[ ! -x "${STOWAGE_CHROMIUM:-/usr/bin/chromium}" ]]; then
  echo "installing chromium (Debian package)"
  if [[ $(id -u) -ne 0 ]]; then
    echo "browser-peers: Chromium is missing and this is not root; install Debian's 'chromium' package" >&2
    exit 1
  fi
  apt-get update -qq
  # fonts-dejavu-core: text in the screenshots (Chromium renders tofu without any font).
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core
fi

mkdir -p "$PEERS_DIR"
if [[ -f "$PEERS_DIR/.browser-stamp" && "$(cat "$PEERS_DIR/.browser-stamp")" == "$STAMP_WANT" ]]; then
  echo "browser peers already installed in $PEERS_DIR"
else
  echo "installing Playwright into $PEERS_DIR/venv"
  [[ -x "$PEERS_DIR/venv/bin/python" ]] || python3 -m venv "$PEERS_DIR/venv"
  "$PEERS_DIR/venv/bin/pip" install --quiet --disable-pip-version-check "${PIP_PKGS[@]}"
  echo "$STAMP_WANT" > "$PEERS_DIR/.browser-stamp"
fi

if [[ -f "$PEERS_DIR/.apps-host-stamp" && "$(cat "$PEERS_DIR/.apps-host-stamp")" == "$NPM_STAMP_WANT" ]]; then
  echo "apps test host packages already installed in $PEERS_DIR"
else
  echo "installing the apps test host's npm packages into $PEERS_DIR"
  [[ -f "$PEERS_DIR/package.json" ]] || echo '{"name":"stowage-peers","private":true}' > "$PEERS_DIR/package.json"
  ( cd "$PEERS_DIR" && npm install --no-audit --no-fund --loglevel=error "${NPM_PKGS[@]}" )
  echo "$NPM_STAMP_WANT" > "$PEERS_DIR/.apps-host-stamp"
fi
