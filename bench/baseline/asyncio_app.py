"""The stock asyncio stack: FastAPI on uvicorn (uvloop, httptools), one
``aiohttp.ClientSession``, the calls in ``asyncio.gather`` under
``asyncio.timeout(0.5)``, and OpenTelemetry's contrib FastAPI and aiohttp-client
instrumentations with a ``BatchSpanProcessor`` over OTLP/HTTP, as a Python shop writes
it. uvicorn serves ``bench.baseline.asyncio_app:app``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from bench.baseline.offers import BUDGET_S, MODES, calls, failed, offer, tracing_on, upstream_url
from pricing.domain.errors import PricingError
from pricing.upstream.gateway import Answer
from pricing.web.offers import Mode


def _setup_tracing(app: FastAPI) -> None:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "stock-asyncio"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    AioHttpClientInstrumentor().instrument()
    FastAPIInstrumentor.instrument_app(app)


class _Upstreams:
    """The one ``aiohttp.ClientSession``, opened with the app's lifespan."""

    session: aiohttp.ClientSession | None = None


def create_app() -> FastAPI:
    upstreams = _Upstreams()
    base = upstream_url()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        upstreams.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        yield
        await upstreams.session.close()

    app = FastAPI(lifespan=lifespan)

    async def fetch(upstream: str, path: str) -> Answer:
        assert upstreams.session is not None
        try:
            async with upstreams.session.get(base + path) as reply:
                reply.raise_for_status()
                body: dict[str, Any] = await reply.json()
                return body
        except (aiohttp.ClientError, ValueError) as exc:
            return failed(upstream, exc)

    async def offers(mode: Mode, request: Request) -> JSONResponse:
        args: dict[str, list[str]] = {}
        for key, value in request.query_params.multi_items():
            args.setdefault(key, []).append(value)
        try:
            query, todo = calls(mode, args)
        except PricingError as exc:
            return JSONResponse({"title": str(exc)}, exc.status)
        tasks = [asyncio.ensure_future(fetch(upstream, path)) for upstream, path in todo]
        try:
            async with asyncio.timeout(BUDGET_S):
                await asyncio.gather(*tasks)
        except TimeoutError:
            for task in tasks:
                task.cancel()
        answers: dict[str, Answer] = {
            upstream: task.result()
            if task.done() and not task.cancelled()
            else failed(upstream, None)
            for (upstream, _), task in zip(todo, tasks, strict=True)
        }
        status, body = offer(mode, query, answers)
        return JSONResponse(body, status)

    def endpoint(mode: Mode) -> Any:
        async def view(request: Request) -> JSONResponse:
            return await offers(mode, request)

        return view

    for mode in MODES:
        app.add_api_route(f"/v1/offers/{mode}", endpoint(mode), methods=["GET"])
    if tracing_on():
        _setup_tracing(app)
    return app


app = create_app()
