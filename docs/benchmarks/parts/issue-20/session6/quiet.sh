#!/usr/bin/env bash
# The quiet before/after benchmarks of this session (issue 20). Run with nothing else on the machine.
set -u
out=/tmp/s6; mkdir -p $out
ov="--no-capacity --offer-rates 40,480 --modes off,default,100 --repeats 2 --duration 20 --warmup 5 --workers 2"
cap="--start-rps 600 --step-rps 50 --max-rps 1100"
log=$out/quiet.log
echo "start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $log
(cd /work/main && .venv/bin/pricingctl bench tracing-overhead $ov --out $out/after --run-dir $out/run-after > $out/after.log 2>&1); echo "after overhead rc=$? $(date +%T)" >> $log
(cd /work/before && .venv/bin/pricingctl bench tracing-overhead $ov --out $out/before --run-dir $out/run-before > $out/before.log 2>&1); echo "before overhead rc=$? $(date +%T)" >> $log
(cd /work/main && .venv/bin/pricingctl bench io-capacity --tracing $cap --out $out/cap-default --run-dir $out/run-cap-default > $out/cap-default.log 2>&1); echo "cap default rc=$? $(date +%T)" >> $log
(cd /work/main && .venv/bin/pricingctl bench io-capacity $cap --out $out/cap-off --run-dir $out/run-cap-off > $out/cap-off.log 2>&1); echo "cap off rc=$? $(date +%T)" >> $log
(cd /work/before && .venv/bin/pricingctl bench io-capacity --tracing $cap --out $out/cap-default-before --run-dir $out/run-cap-default-before > $out/cap-default-before.log 2>&1); echo "cap default before rc=$? $(date +%T)" >> $log
(cd /work/main && .venv/bin/pricingctl bench timing-accuracy --out $out/acc > $out/acc.log 2>&1); echo "accuracy rc=$? $(date +%T)" >> $log
low="--no-capacity --offer-rates 2 --modes off,default --repeats 2 --duration 20 --warmup 5 --workers 2"
(cd /work/main && .venv/bin/pricingctl bench tracing-overhead $low --out $out/after-2rps --run-dir $out/run-after-2 > $out/after-2.log 2>&1); echo "after 2rps rc=$? $(date +%T)" >> $log
(cd /work/before && .venv/bin/pricingctl bench tracing-overhead $low --out $out/before-2rps --run-dir $out/run-before-2 > $out/before-2.log 2>&1); echo "before 2rps rc=$? $(date +%T)" >> $log
echo done >> $log
out=/tmp/s6; log=$out/quiet.log
until grep -q "^done" $log; do sleep 5; done
r40="--no-capacity --offer-rates 40 --modes off,default --repeats 3 --duration 20 --warmup 5 --workers 2"
(cd /work/main && .venv/bin/pricingctl bench tracing-overhead $r40 --out $out/after-40 --run-dir $out/run-after-40 > $out/after-40.log 2>&1); echo "after 40 rc=$? $(date +%T)" >> $log
(cd /work/before && .venv/bin/pricingctl bench tracing-overhead $r40 --out $out/before-40 --run-dir $out/run-before-40 > $out/before-40.log 2>&1); echo "before 40 rc=$? $(date +%T)" >> $log
echo done2 >> $log
