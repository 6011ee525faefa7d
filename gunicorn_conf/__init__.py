"""gunicorn config modules, one per pool (`gunicorn -c python:gunicorn_conf.io`).

Each pool module names its settings as plain top-level names under comment headings
(as gunicorn's example config does), each value read from routes.toml through
`common.pool_settings` (`routing.gunicorn` derives them); its hooks are imported from
`common`, the same for every pool.
"""
