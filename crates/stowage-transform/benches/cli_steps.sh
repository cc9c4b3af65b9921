#!/usr/bin/env bash
# Where `stowage transform` spends its time on the 50 MB Tableau result: the per-step timings
# it logs at debug level (read, parse, expand, fields = decoding, fields store = the fs store's
# put), for each binary given, alternating, each round started when the machine is idle and
# each run preceded by the Python floor (as in cli_ab.py, so every run sees the same page
# cache). Prints the median of each step per binary. Inputs from gen_input.py.
#
#   ROUNDS=9 crates/stowage-transform/benches/cli_steps.sh /tmp/stowage-base target/release/stowage
set -euo pipefail
DIR=${DIR:-/tmp/stowage-bench}
cd "$DIR"
busy() {
  read -r _ u1 n1 s1 i1 w1 _ < /proc/stat; sleep 2; read -r _ u2 n2 s2 i2 w2 _ < /proc/stat
  echo $(( 100 * ((u2-u1)+(n2-n1)+(s2-s1)) / ((u2-u1)+(n2-n1)+(s2-s1)+(i2-i1)+(w2-w1)+1) ))
}
log=$(mktemp)
for r in $(seq 1 "${ROUNDS:-9}"); do
  for _ in $(seq 1 200); do [ "$(busy)" -lt 10 ] && break; done
  for b in "$@"; do
    python3 -c "import base64,hashlib; hashlib.sha256(base64.b64decode(open('payload.b64','rb').read()))"
    rm -rf store
    STOWAGE_LOG=debug "$b" --store store transform --tool download_workbook tableau_50mb.json 2>&1 >/dev/null \
      | sed 's/\x1b\[[0-9;]*m//g' | grep -oE 'step="(read|parse|expand|fields|fields store)" ms=[0-9.e-]+' | sed "s|^|$b |" >> "$log"
  done
done
rm -rf store
python3 - "$log" "$@" <<'PY'
import collections, re, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    b, step, ms = re.match(r'(\S+) step="([^"]+)" ms=(\S+)', line).groups()
    d[(b, step)].append(float(ms))
for step in ["read", "parse", "expand", "fields", "fields store"]:
    print(f"{step:13}", "  ".join(f"{b}: {statistics.median(d[(b, step)]):6.1f}" for b in sys.argv[2:]))
PY
rm -f "$log"
