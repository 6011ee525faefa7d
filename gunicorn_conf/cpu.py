"""gunicorn config for the cpu pool: rideshare quotes, a few greenlets per process (CPU-bound work)."""

from gunicorn_conf.common import post_fork, settings_for

globals().update(settings_for("cpu"))

__all__ = ["post_fork"]
