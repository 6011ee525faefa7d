"""`pricingctl bench baseline`: the offer endpoint as a Python shop would write it, on
the stock stacks the project is measured against (never part of the service):

- ``gevent_app``: Flask on gunicorn's gevent worker, ``requests``, and OpenTelemetry's
  contrib Flask and requests instrumentations;
- ``asyncio_app``: FastAPI on uvicorn (uvloop, httptools), aiohttp, and the contrib
  FastAPI and aiohttp-client instrumentations;
- ``offers``: what both share with the service (the domain: query, calls, the offer),
  so the arms differ only in framework, HTTP client and tracing;
- ``sink``: the OTLP/HTTP receiver every arm exports to;
- ``part``: the part itself (each arm side by side with the project's io pool).

Both apps read the standard variables: ``OTEL_SDK_DISABLED=true`` leaves OpenTelemetry
out entirely; otherwise spans go by ``BatchSpanProcessor`` over OTLP/HTTP to
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, sampled by the incoming ``traceparent``
(parent-based, as the project's pools).
"""
