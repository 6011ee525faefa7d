"""Route config -> Envoy config and per-pool settings.

`routing` is pure data and rendering: it loads `routes.toml`, validates it
and renders what is derived from it (envoy.yaml, gunicorn settings). It opens
no sockets and imports no Flask at module level.
"""
