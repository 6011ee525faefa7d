"""Summarise gcprobe-samples.txt (lines: pid, unix time, PRICING_TRACING, young
threshold, {generation: [collections, CPU ns, longest ns]}, process CPU s), written every
5 s by the workers of a run with gcprobe.patch applied:

    GCPROBE=1 GCTHRESH=700 pricingctl bench tracing-overhead --no-capacity \\
        --offer-rates 480 --modes off,default --repeats 1 --duration 30 --warmup 5 --workers 2
    (then GCTHRESH=10000)
    python gcprobe_summary.py gcprobe-samples.txt

For each io worker (the busy ones): the window from its 3rd to its 7th sample (inside
the measured 30 s).
"""

import ast
import sys
from collections import defaultdict

by_pid = defaultdict(list)
with open(sys.argv[1]) as samples:
    for line in samples:
        pid, t, mode, threshold, rest = line.split(" ", 4)
        stats, _, cpu = rest.rpartition(" ")
        row = (float(t), mode, int(threshold), ast.literal_eval(stats), float(cpu))
        by_pid[pid].append(row)
for _, rows in sorted(by_pid.items()):
    if rows[-1][4] < 5:  # the cpu pool's worker, idle in this benchmark
        continue
    a, b = rows[2], rows[min(6, len(rows) - 1)]
    seconds, cpu_s = b[0] - a[0], b[4] - a[4]
    gc_ms = sum(b[3][g][1] - a[3][g][1] for g in range(3)) / 1e6
    per_min = [round((b[3][g][0] - a[3][g][0]) * 60 / seconds) for g in range(3)]
    longest = [round(b[3][g][2] / 1e6, 1) for g in range(3)]
    print(
        f"{a[1]:5s} threshold {a[2]:6d}: CPU {cpu_s * 1000 / seconds:.0f} ms/s, "
        f"collector {gc_ms / seconds:.1f} ms/s ({gc_ms / (cpu_s * 1000) * 100:.1f} %), "
        f"collections a minute by generation {per_min}, longest (ms) {longest}"
    )
