"""Tracing for the gevent pools: split every upstream call into network time and
event-loop scheduling delay, name the greenlets that caused the delay, and read it back.

- ``timing/``: the gevent timing core (no OpenTelemetry, no Flask);
- ``server``, ``client``, ``export``, ``metrics``, ``settings``, ``attributes``: the
  per-worker OpenTelemetry and Flask wiring that puts the core's numbers on spans;
- ``spans``, ``report``: spans read back (Jaeger or the OTLP span file) and summarized.

Rule for everything in this package: tracing never breaks a request. Hooks swallow their
own errors, log them (rate-limited) and let the call carry on unmeasured.
"""
