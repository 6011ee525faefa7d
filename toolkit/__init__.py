"""The small helpers every layer shares, so that each is written once.

`toolkit` is the bottom layer: standard library only, it imports no other package of
the project, and any of them may import it (but the gevent timing core, which stays
usable on its own). One module per helper: an HTTP request read back whole (`fetch`), a
wait for a condition (`wait`), the last lines of a log (`logs`), an installed package's
version (`version`); and the names the layers share, each written once (`contract`).
"""
