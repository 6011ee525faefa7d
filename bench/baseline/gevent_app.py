"""The stock gevent stack: Flask on gunicorn's gevent worker, one ``requests.Session``
per upstream, the calls in ``gevent.spawn``/``joinall``, and OpenTelemetry's contrib
Flask and requests instrumentations with a ``BatchSpanProcessor`` over OTLP/HTTP, as a
Python shop writes it. gunicorn loads ``bench.baseline.gevent_app:app`` in its worker,
after the worker monkey-patched the standard library."""

from __future__ import annotations

from typing import Any

import gevent
import requests
from flask import Flask, Response, json, request

from bench.baseline.offers import BUDGET_S, MODES, calls, failed, offer, tracing_on, upstream_url
from pricing.domain.errors import PricingError
from pricing.upstream.gateway import Answer
from pricing.web.offers import Mode
from toolkit.contract import JSON

UPSTREAMS = ("vehicles", "routing", "promotions")


def _setup_tracing(app: Flask) -> None:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.flask import FlaskInstrumentor
    from opentelemetry.instrumentation.requests import RequestsInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "stock-gevent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    FlaskInstrumentor().instrument_app(app)
    RequestsInstrumentor().instrument()


def create_app() -> Flask:
    app = Flask(__name__)
    base = upstream_url()
    sessions = {name: requests.Session() for name in UPSTREAMS}

    def fetch(upstream: str, path: str) -> Answer:
        try:
            reply = sessions[upstream].get(base + path, timeout=BUDGET_S)
            reply.raise_for_status()
            body: dict[str, Any] = reply.json()
            return body
        except requests.RequestException as exc:
            return failed(upstream, exc)

    def offers(mode: Mode) -> Response:
        try:
            query, todo = calls(mode, request.args.to_dict(flat=False))
        except PricingError as exc:
            return Response(json.dumps({"title": str(exc)}), exc.status, mimetype=JSON)
        jobs = [gevent.spawn(fetch, upstream, path) for upstream, path in todo]
        gevent.joinall(jobs, timeout=BUDGET_S)
        answers: dict[str, Answer] = {
            upstream: job.value if job.successful() else failed(upstream, None)
            for (upstream, _), job in zip(todo, jobs, strict=True)
        }
        for job in jobs:
            job.kill(block=False)
        status, body = offer(mode, query, answers)
        return Response(json.dumps(body), status, mimetype=JSON)

    for mode in MODES:
        app.add_url_rule(
            f"/v1/offers/{mode}", f"offers_{mode}", lambda mode=mode: offers(mode), methods=["GET"]
        )
    if tracing_on():
        _setup_tracing(app)
    return app


app = create_app()
