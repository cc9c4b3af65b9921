#!/usr/bin/env bash
# Vendors the third-party files the playground page and the MCP Apps viewer embed
# (crates/stowage-playground/assets/vendor/), each fetched with `npm pack` at an exact version. npm
# checks the tarball against the registry's integrity hash; this script checks it once more itself.
# - ECharts' minified browser build and its licence; echarts.sha256 holds the sha256 of
#   echarts.min.js, then `echarts@<version>`.
# - pdf.js (pdfjs-dist): the library and its worker as ES modules (pdfjs/pdf.min.mjs,
#   pdfjs/pdf.worker.min.mjs) and its licence; the viewer loads them lazily through the
#   artifact_viewer_asset tool and runs the worker on its own thread. pdfjs.sha256 holds
#   `<sha256>  <file>` for both files, then `pdfjs-dist@<version>`.
# A review sees what changed. Re-run it only to move to another version; the files it writes are
# committed.
set -euo pipefail
cd "$(dirname "$0")/.."

ECHARTS_VERSION="${ECHARTS_VERSION:-6.0.0}"
PDFJS_VERSION="${PDFJS_VERSION:-6.5.438}"
DEST="crates/stowage-playground/assets/vendor"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# fetch NAME VERSION: packs NAME@VERSION, checks it, and unpacks it into $TMP/NAME/package.
fetch() {
  local name="$1" version="$2" want got tarball packed
  # The registry's own integrity string (sha512-<base64>) for this exact version.
  want="$(npm view "${name}@${version}" dist.integrity 2>/dev/null)"
  if [[ "$want" != sha512-* ]]; then
    echo "no sha512 integrity for ${name}@${version} on the registry: '$want'" >&2
    exit 1
  fi
  mkdir -p "$TMP/$name"
  # npm pack verifies the download against that integrity itself (it refuses a mismatch).
  tarball="$(cd "$TMP/$name" && npm pack --silent "${name}@${version}" 2>/dev/null | tail -n1)"
  got="sha512-$(openssl dgst -sha512 -binary "$TMP/$name/$tarball" | base64 -w0)"
  if [[ "$got" != "$want" ]]; then
    echo "integrity mismatch for $tarball: got $got, registry says $want" >&2
    exit 1
  fi
  tar -xzf "$TMP/$name/$tarball" -C "$TMP/$name"
  packed="$(node -p 'require(process.argv[1]).version' "$TMP/$name/package/package.json")"
  if [[ "$packed" != "$version" ]]; then
    echo "the tarball holds ${name} $packed, not $version" >&2
    exit 1
  fi
}

mkdir -p "$DEST" "$DEST/pdfjs"

fetch echarts "$ECHARTS_VERSION"
install -m 0644 "$TMP/echarts/package/dist/echarts.min.js" "$DEST/echarts.min.js"
install -m 0644 "$TMP/echarts/package/LICENSE" "$DEST/echarts.LICENSE"
{
  sha256sum "$DEST/echarts.min.js" | cut -d' ' -f1
  echo "echarts@${ECHARTS_VERSION}"
} > "$DEST/echarts.sha256"
echo "vendored echarts@${ECHARTS_VERSION} ($(wc -c < "$DEST/echarts.min.js") bytes) into $DEST"
cat "$DEST/echarts.sha256"

fetch pdfjs-dist "$PDFJS_VERSION"
for f in pdf.min.mjs pdf.worker.min.mjs; do
  install -m 0644 "$TMP/pdfjs-dist/package/build/$f" "$DEST/pdfjs/$f"
done
install -m 0644 "$TMP/pdfjs-dist/package/LICENSE" "$DEST/pdfjs/LICENSE"
{
  (cd "$DEST/pdfjs" && sha256sum pdf.min.mjs pdf.worker.min.mjs)
  echo "pdfjs-dist@${PDFJS_VERSION}"
} > "$DEST/pdfjs.sha256"
echo "vendored pdfjs-dist@${PDFJS_VERSION} ($(cat "$DEST/pdfjs/pdf.min.mjs" "$DEST/pdfjs/pdf.worker.min.mjs" | wc -c) bytes) into $DEST/pdfjs"
cat "$DEST/pdfjs.sha256"
