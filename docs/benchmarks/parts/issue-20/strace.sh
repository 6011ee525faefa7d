#!/usr/bin/env bash
# usage: run.sh TREE OUTDIR — syscalls per offer of the io worker, tracing off vs default,
# 40 offers/s: strace -c -f attached for 10 s inside each arm's measured window.
set -u
tree=$1 out=$2
mkdir -p "$out"
cd "$tree"
.venv/bin/pricingctl bench tracing-overhead --no-capacity --offer-rates 40 --modes off,default \
  --repeats 1 --duration 25 --warmup 5 --workers 2 --out "$out/bench" --run-dir "$out/run" \
  > "$out/bench.log" 2>&1 &
bench=$!
for arm in off default; do
  until grep -q "tracing $arm, repeat 1/1: measuring" "$out/bench.log"; do sleep 0.5; done
  sleep 3
  worker=""
  for pid in $(pgrep -f "gunicorn --config python:gunicorn_conf.io"); do
    ppid=$(ps -o ppid= -p "$pid" | tr -d ' ')
    if tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -qF "$out/run/offers-40/tracing-$arm-r1" \
       && ps -o args= -p "$ppid" | grep -q "gunicorn_conf.io"; then
      worker=$pid
    fi
  done
  echo "arm $arm worker $worker" >> "$out/pids"
  timeout -s INT 10 strace -c -f -p "$worker" -o "$out/strace-$arm.txt" 2>/dev/null
done
wait $bench
