#!/usr/bin/env python3
"""Interleaved end-to-end A/B of `stowage transform` on the 50 MB Tableau result.

    python3 crates/stowage-transform/benches/cli_ab.py [--rounds N] [--dir DIR] NAME=BINARY...

Each round runs, for every binary, the Python floor (`hashlib.sha256(base64.b64decode(s))` with
interpreter start and file read, as in cli_bench.sh) and then that binary, each stowage run
from an empty fs store. Rounds start only when the machine is idle (under 10% busy over 2 s):
on the shared 2-core machine a neighbour's build otherwise decides the result.

Why interleaved, and why Python before each binary: on this VM a write into fresh page cache
costs ~8 ms for 37.5 MB when the kernel hands out pages freed a moment ago and ~90 ms when it
hands out pages the host has to back first, so what ran just before decides much of a run.
hyperfine (cli_bench.sh) runs all runs of one command before the next; here every stowage run
follows the same thing (a Python run, which frees ~90 MB as it exits). Prints per-command
medians and ratios to the Python floor of the same rounds. Inputs come from gen_input.py (run
it first, or use cli_bench.sh once).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def busy(window=2.0):
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[0] + v[1] + v[2], sum(v)
    b1, t1 = sample()
    time.sleep(window)
    b2, t2 = sample()
    return 100 * (b2 - b1) / max(t2 - t1, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--dir", default="/tmp/stowage-bench")
    ap.add_argument("binaries", nargs="+", help="NAME=PATH")
    args = ap.parse_args()
    d = args.dir
    src = os.path.join(d, "tableau_50mb.json")
    store = os.path.join(d, "store")
    py = ("import base64,hashlib; s=open('%s','rb').read(); "
          "print(hashlib.sha256(base64.b64decode(s)).hexdigest())") % os.path.join(d, "payload.b64")
    floor = ("python floor", [sys.executable, "-c", py])
    cmds = []
    for name, path in (b.split("=", 1) for b in args.binaries):
        cmds += [floor, (name, [path, "--store", store, "transform", "--tool", "download_workbook", src])]
    times = {name: [] for name, _ in cmds}
    for r in range(args.rounds):
        for _ in range(200):
            if busy() < 10:
                break
        for name, cmd in cmds:
            shutil.rmtree(store, ignore_errors=True)
            t = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            times[name].append((time.perf_counter() - t) * 1000)
        print("round %d: %s" % (r + 1, "  ".join("%s %.0f" % (n, v[-1]) for n, v in times.items() if n != "python floor")), flush=True)
    shutil.rmtree(store, ignore_errors=True)
    floor = statistics.median(times["python floor"])
    for name, v in times.items():
        m = statistics.median(v)
        print("median %7.1f ms  %.2fx python  (min %.1f, max %.1f)  %s" % (m, m / floor, min(v), max(v), name))


if __name__ == "__main__":
    main()
