#!/usr/bin/env bash
# Installs what the playground's browser test drives (issue 16, see ../shared/PEERS.md):
# Debian's Chromium (Playwright's own browser download does not work offline) and Playwright
# for Python into target/peers/venv. Idempotent: a stamp file records what was installed, so
# a second run with the same pins does nothing. The test finds Chromium at /usr/bin/chromium
# (STOWAGE_CHROMIUM overrides) and Python through STOWAGE_PEERS_DIR (default target/peers).
set -euo pipefail
cd "$(dirname "$0")/.."

PEERS_DIR="${STOWAGE_PEERS_DIR:-target/peers}"
PIP_PKGS=("playwright==1.65.2")
STAMP_WANT="pip:${PIP_PKGS[*]}"

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
  exit 0
fi
echo "installing Playwright into $PEERS_DIR/venv"
[[ -x "$PEERS_DIR/venv/bin/python" ]] || python3 -m venv "$PEERS_DIR/venv"
"$PEERS_DIR/venv/bin/pip" install --quiet --disable-pip-version-check "${PIP_PKGS[@]}"
echo "$STAMP_WANT" > "$PEERS_DIR/.browser-stamp"
