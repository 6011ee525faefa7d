"""The environment a pool process reads, each name written once: which pool it
serves, which route config, where its upstreams are. `stack` sets them; `pricing`,
`routing.load` and `gunicorn_conf` read them."""

from __future__ import annotations

from typing import Final

#: Path of the route config file (default: routes.toml next to the code).
ROUTES_ENV: Final = "PRICING_ROUTES"
#: The pool this process serves (default: the shared pool).
POOL_ENV: Final = "PRICING_POOL"
#: Base URL of every upstream, overriding [upstreams].base_url (the stack's simulator).
UPSTREAM_URL_ENV: Final = "PRICING_UPSTREAM_URL"
#: Directory under which each pool keeps its metrics files (one sub-directory per pool,
#: emptied when the pool starts; default: under the system's temporary directory).
METRICS_DIR_ENV: Final = "PRICING_METRICS_DIR"
#: PEM bundle of the CAs an `https://` upstream's certificate is checked against
#: (default: the system's).
UPSTREAM_CA_FILE_ENV: Final = "PRICING_UPSTREAM_CA_FILE"
#: ``off``: the pools write no access line per request (default ``on``; Envoy's access
#: log has one per request either way).
ACCESS_LOG_ENV: Final = "PRICING_ACCESS_LOG"
