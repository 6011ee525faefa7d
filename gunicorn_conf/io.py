"""gunicorn config for the io pool: bike and scooter offers, many greenlets per process."""

from gunicorn_conf.common import (
    child_exit,
    on_starting,
    post_fork,
    post_worker_init,
    settings_for,
    worker_exit,
)

globals().update(settings_for("io"))

__all__ = ["child_exit", "on_starting", "post_fork", "post_worker_init", "worker_exit"]
