"""gunicorn config modules, one per pool (`gunicorn -c python:gunicorn_conf.io`).

Each pool module sets only what differs (its pool name); settings come from
routes.toml through `routing.gunicorn`, hooks from `common`.
"""
