#!/usr/bin/env bash
# End-to-end benchmark of `stowage transform` on the 50 MB Tableau result, with the floors
# BENCHMARKS.md compares it to, all in one run. Needs hyperfine (apt-get install -y hyperfine)
# and a release build (cargo build --release -p stowage).
#
#   crates/stowage-transform/benches/cli_bench.sh [DIR]
#
# BIN picks the binary (default target/release/stowage). BASE=/path/to/another/stowage adds
# that binary to the same hyperfine run (an A/B: the two alternate within one window, so a
# drifting disk or a neighbour's build affects both alike). RUNS (default 20) sets the runs.
# Ends with the median of every command and the ratios BENCHMARKS.md quotes.
set -euo pipefail
cd "$(dirname "$0")/../../.."
BIN=${BIN:-$PWD/target/release/stowage}
BASE=${BASE:-}
RUNS=${RUNS:-20}
DIR=${1:-/tmp/stowage-bench}
python3 crates/stowage-transform/benches/gen_input.py "$DIR"
IN=$DIR/tableau_50mb.json
PY_FLOOR="import base64,hashlib; s=open('$DIR/payload.b64','rb').read(); print(hashlib.sha256(base64.b64decode(s)).hexdigest())"

cmds=(-n "stowage transform (50 MB)" "$BIN --store $DIR/store transform --tool download_workbook $IN > $DIR/out.json")
if [ -n "$BASE" ]; then
  cmds+=(-n "base: stowage transform (50 MB)" "$BASE --store $DIR/store transform --tool download_workbook $IN > $DIR/out.json")
fi
cmds+=(
  -n "stowage transform --report (50 MB)" "$BIN --store $DIR/store transform --tool download_workbook --report $DIR/report.json $IN > $DIR/out.json"
  -n "floor: sha256sum of the decoded PDF" "sha256sum $DIR/payload.pdf"
  -n "floor: python sha256(b64decode(s))" "python3 -c \"$PY_FLOOR\""
)
# Each run starts from an empty store, as a first transform of that result would.
hyperfine --warmup 2 --runs "$RUNS" --export-markdown "$DIR/hyperfine.md" --export-json "$DIR/hyperfine.json" \
  --prepare "rm -rf $DIR/store" "${cmds[@]}"

# The Python floor without interpreter start-up and file read: just the expression.
python3 - "$DIR/payload.b64" <<'PY'
import base64, hashlib, sys, time
s = open(sys.argv[1], "rb").read()
best = []
for _ in range(7):
    t = time.perf_counter(); hashlib.sha256(base64.b64decode(s)).hexdigest(); best.append(time.perf_counter() - t)
best.sort()
print(f"python expression only: median {best[3]*1000:.1f} ms over 7 runs")
PY

# Medians (hyperfine prints means) and the ratios to the Python command, from this run.
python3 - "$DIR/hyperfine.json" <<'PY'
import json, statistics, sys
results = json.load(open(sys.argv[1]))["results"]
med = {r["command"]: statistics.median(r["times"]) * 1000 for r in results}
py = med["floor: python sha256(b64decode(s))"]
for name, ms in med.items():
    print(f"median {ms:7.1f} ms  {ms / py:5.2f}x python  {name}")
PY

for bin in "$BIN" ${BASE:+"$BASE"}; do
  rm -rf "$DIR/store"
  /usr/bin/time -v "$bin" --store "$DIR/store" transform --tool download_workbook "$IN" > "$DIR/out.json" 2> "$DIR/time.txt"
  rss_kb=$(awk '/Maximum resident set size/ {print $6}' "$DIR/time.txt")
  in_bytes=$(stat -c %s "$IN")
  echo "$bin: peak RSS ${rss_kb} KB for ${in_bytes} bytes of input: $(python3 -c "print(round($rss_kb*1024/$in_bytes, 2))")x; output $(stat -c %s "$DIR/out.json") bytes"
done
