"""gunicorn config for the cpu pool: rideshare quotes, one greenlet per process."""

# Every pool's settings (worker class, timeouts, request limits, logging) and hooks,
# each named in gunicorn_conf.common (its __all__).
from gunicorn_conf.common import *  # noqa: F403
from gunicorn_conf.common import pool_settings as _pool_settings

# This pool's own: [pools.cpu] of routes.toml (routing.gunicorn.pool_settings).
_pool = _pool_settings("cpu")

# Server socket
bind, backlog = _pool.bind, _pool.backlog
# Worker processes
workers, worker_connections, keepalive = _pool.workers, _pool.worker_connections, _pool.keepalive
# The app each worker serves
wsgi_app, raw_env, proc_name = _pool.wsgi_app, _pool.raw_env, _pool.proc_name
