"""gunicorn config for the io pool: bike and scooter offers, many greenlets per process.

Each value is read from routes.toml when gunicorn loads this file
(`gunicorn_conf.common.pool_settings`, through `routing.gunicorn`): change the route
config, not this file. The hooks are every pool's, from `gunicorn_conf.common`.
"""

# --- Server hooks: every pool's (gunicorn finds them by name) ---------------------------
from gunicorn_conf.common import (  # noqa: F401
    child_exit,
    on_starting,
    post_fork,
    post_worker_init,
    worker_exit,
)
from gunicorn_conf.common import pool_settings as _pool_settings

_pool = _pool_settings("io")

# --- The app ---------------------------------------------------------------------------
wsgi_app = _pool.wsgi_app
raw_env = _pool.raw_env  # the app reads its pool name from PRICING_POOL
proc_name = _pool.proc_name

# --- Server socket ---------------------------------------------------------------------
bind = _pool.bind
backlog = _pool.backlog

# --- Worker processes ------------------------------------------------------------------
workers = _pool.workers
worker_class = _pool.worker_class
worker_connections = _pool.worker_connections  # greenlets per worker
timeout = _pool.timeout  # seconds a silent worker lives
graceful_timeout = _pool.graceful_timeout  # seconds to finish what was accepted
keepalive = _pool.keepalive  # seconds an idle connection from Envoy is kept

# --- Requests: limits and the proxy in front -------------------------------------------
limit_request_line = _pool.limit_request_line
limit_request_field_size = _pool.limit_request_field_size
forwarded_allow_ips = _pool.forwarded_allow_ips
secure_scheme_headers = _pool.secure_scheme_headers

# --- Logging ---------------------------------------------------------------------------
logger_class = _pool.logger_class
accesslog = _pool.accesslog
errorlog = _pool.errorlog
loglevel = _pool.loglevel

# --- Server mechanics ------------------------------------------------------------------
control_socket_disable = _pool.control_socket_disable
