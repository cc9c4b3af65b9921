#!/usr/bin/env bash
# Vendors the third-party files the playground page embeds (crates/stowage-playground/assets/vendor/):
# ECharts' minified browser build and its licence, fetched with `npm pack` at an exact version. npm checks
# the tarball against the registry's integrity hash; this script checks it once more itself, then writes
# echarts.sha256 (the sha256 of echarts.min.js, then `echarts@<version>`) so a review sees what changed.
# Re-run it only to move to another version; the files it writes are committed.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="${ECHARTS_VERSION:-6.0.0}"
DEST="crates/stowage-playground/assets/vendor"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

mkdir -p "$DEST"

# The registry's own integrity string (sha512-<base64>) for this exact version.
WANT="$(npm view "echarts@${VERSION}" dist.integrity 2>/dev/null)"
if [[ "$WANT" != sha512-* ]]; then
  echo "no sha512 integrity for echarts@${VERSION} on the registry: '$WANT'" >&2
  exit 1
fi

# npm pack verifies the download against that integrity itself (it refuses a mismatch).
TARBALL="$(cd "$TMP" && npm pack --silent "echarts@${VERSION}" 2>/dev/null | tail -n1)"
GOT="sha512-$(openssl dgst -sha512 -binary "$TMP/$TARBALL" | base64 -w0)"
if [[ "$GOT" != "$WANT" ]]; then
  echo "integrity mismatch for $TARBALL: got $GOT, registry says $WANT" >&2
  exit 1
fi

tar -xzf "$TMP/$TARBALL" -C "$TMP" package/dist/echarts.min.js package/LICENSE package/package.json
PACKED_VERSION="$(node -p 'require(process.argv[1]).version' "$TMP/package/package.json")"
if [[ "$PACKED_VERSION" != "$VERSION" ]]; then
  echo "the tarball holds echarts $PACKED_VERSION, not $VERSION" >&2
  exit 1
fi

install -m 0644 "$TMP/package/dist/echarts.min.js" "$DEST/echarts.min.js"
install -m 0644 "$TMP/package/LICENSE" "$DEST/echarts.LICENSE"
{
  sha256sum "$DEST/echarts.min.js" | cut -d' ' -f1
  echo "echarts@${VERSION}"
} > "$DEST/echarts.sha256"

echo "vendored echarts@${VERSION} ($(wc -c < "$DEST/echarts.min.js") bytes) into $DEST"
cat "$DEST/echarts.sha256"
