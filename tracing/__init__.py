"""Tracing for the gevent pools: split every upstream call into network time and
event-loop scheduling delay, name the greenlets that caused the delay, and read it back.

- ``timing/``: the gevent timing core (no OpenTelemetry, no Flask);
- ``server`` (the worker's set-up: ``worker``), ``flask_tracing`` (the Flask
  instrumentor), ``request_spans``, ``client``, ``export``, ``metrics`` (its table:
  ``metric_families``), ``logs``, ``settings``, ``attributes``: the per-worker
  OpenTelemetry and Flask wiring that puts the core's numbers on spans;
- ``readback/``: what reads the results back outside the pools (spans from Jaeger or
  the OTLP span file, breakdowns, reports, route usage); worker code never imports it.

Rule for everything in this package: tracing never breaks a request. Hooks swallow their
own errors, log them (rate-limited) and let the call carry on unmeasured.
"""
