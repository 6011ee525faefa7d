"""The app a pool of the benchmark's stack serves when a part needs more than the
service: the synthetic service's endpoints (`bench.synth`, for `routes-scale`), or
another HTTP client library for the upstream calls (`bench.clients`, for
`http-client`). gunicorn loads it by name (`Stack.app`, what `entry` returns), and it
builds the app through the service's own factory, `pricing.create_app`; the pool, the
route config and the upstreams come from the pool's environment, as for the service's
own app.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from flask import Flask

from pricing import create_app


def app(spec: str | None = None, client: str | None = None) -> Flask:
    """The pool's app: the service's endpoints, plus those of the synthetic service
    whose ``synth.json`` *spec* names; the upstream calls made by library *client*
    (default the service's own client)."""
    from bench import clients, synth
    from routing.errors import RouteConfigError
    from toolkit.contract import POOL_ENV

    extra = None
    if spec is not None:
        try:
            extra = synth.endpoints(json.loads(Path(spec).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError) as exc:
            raise RouteConfigError(f"{spec}: not a synthetic service's spec: {exc}") from None
    factory = clients.client_factory(client) if client is not None else None
    made = create_app(extra_endpoints=extra, upstream_client=factory)
    if client is not None:  # the http-client part's test reads which client each pool ran
        logging.getLogger("gunicorn.error").info(
            "bench.pool_app: pool %s (upstream client %s)", made.config[POOL_ENV], client
        )
    return made


def entry(spec: Path | None = None, client: str | None = None) -> str:
    """`app` as gunicorn names it, for `Stack.app`."""
    args = []
    if spec is not None:
        args.append(f"spec={str(spec)!r}")
    if client is not None:
        args.append(f"client={client!r}")
    return f"bench.pool_app:app({', '.join(args)})"
