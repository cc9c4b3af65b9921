#!/usr/bin/env bash
# In-process A/B of the 50 MB pipeline benches: alternates criterion bench binaries (build one
# per version with `cargo bench -p stowage-transform --bench pipeline --no-run` and copy the
# `target/release/deps/pipeline-*` it names), each run started only when the machine is idle
# (under 10% busy over 2 s; on the shared 2-core machine a neighbour's build otherwise decides
# the result), and prints criterion's median per run, then the median of those and the ratio
# of each binary to the first. FILTER picks the benches (default `large`, the two 50 MB ones;
# `'tableau_1mb|light'` for the small ones).
#
#   ROUNDS=5 crates/stowage-transform/benches/ab_inproc.sh /tmp/bench-base /tmp/bench-new
set -euo pipefail
work=$(mktemp -d)
cd "$work"   # criterion writes target/criterion here
busy() {
  read -r _ u1 n1 s1 i1 w1 _ < /proc/stat; sleep 2; read -r _ u2 n2 s2 i2 w2 _ < /proc/stat
  echo $(( 100 * ((u2-u1)+(n2-n1)+(s2-s1)) / ((u2-u1)+(n2-n1)+(s2-s1)+(i2-i1)+(w2-w1)+1) ))
}
for r in $(seq 1 "${ROUNDS:-5}"); do
  for b in "$@"; do
    for _ in $(seq 1 200); do [ "$(busy)" -lt 10 ] && break; done
    rm -rf target/criterion
    "$b" --bench --warm-up-time 1 --measurement-time 3 "${FILTER:-large}" > /dev/null 2>&1
    for f in $(find target/criterion -path '*/new/estimates.json' | sort); do
      t=$(basename "$(dirname "$(dirname "$f")")")
      python3 -c "import json; d = json.load(open('$f')); print('$b $t %.3f' % (d['median']['point_estimate'] / 1e6))"
    done
  done
done | tee "$work/runs.txt"
python3 - "$work/runs.txt" "$1" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    b, t, ms = line.split()
    runs[(b, t)].append(float(ms))
for (b, t), v in sorted(runs.items()):
    m, first = statistics.median(v), statistics.median(runs[(sys.argv[2], t)])
    print(f"median {m:7.2f} ms  {m / first:4.2f}x  {t}  {b}")
PY
rm -rf "$work"
