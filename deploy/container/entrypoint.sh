#!/bin/sh
# The image's entry point: run one pool (gunicorn, routes.toml's settings for it) or
# the upstream simulator, on 0.0.0.0:$PRICING_PORT inside the container.
#   pricing-entrypoint [POOL|simulator]     (default: $PRICING_POOL)
set -eu
pool="${1:-${PRICING_POOL}}"
port="${PRICING_PORT:-8000}"
if [ "$pool" = "simulator" ]; then
    exec python -m simulator --container --bind "0.0.0.0:${port}" --config /app/simulator.toml
fi
export PRICING_POOL="$pool"
# --bind on the command line overrides the config's loopback bind: a container's
# 0.0.0.0 is its own network namespace. `pricingctl up` never does this.
exec gunicorn --config "python:gunicorn_conf.${pool}" --bind "0.0.0.0:${port}"
