"""gunicorn config for the shared layout: one pool serves every endpoint (the "before")."""

from gunicorn_conf.common import (
    child_exit,
    on_starting,
    post_fork,
    post_worker_init,
    settings_for,
    worker_exit,
)

globals().update(settings_for("shared"))

__all__ = ["child_exit", "on_starting", "post_fork", "post_worker_init", "worker_exit"]
