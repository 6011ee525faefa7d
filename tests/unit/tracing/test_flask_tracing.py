"""The Flask instrumentor: instrumenting twice changes nothing, uninstrumenting gives
the app back as it was, and an instrumented app's requests get their spans."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

import tracing.server
from tracing.flask_tracing import INSTRUMENTED, MODE, FlaskTracing
from tracing.readback.spans import Span, from_file
from tracing.settings import Mode, TracingSettings
from tracing.worker import WorkerTracing


@pytest.fixture(autouse=True)
def _reset_worker() -> Iterator[None]:
    tracing.server.shutdown_worker()
    yield
    tracing.server.shutdown_worker()


@pytest.fixture
def span_file(tmp_path: Path) -> Path:
    return tmp_path / "spans.jsonl"


@pytest.fixture
def worker(span_file: Path) -> WorkerTracing:
    settings = TracingSettings(mode=Mode.FULL, otlp_endpoint=None, span_file=span_file)
    worker = tracing.server.setup_worker("io", settings, tracing.server.Sampling(ratio=1.0))
    assert worker is not None
    return worker


def hello_app() -> Flask:
    app = Flask(__name__)
    app.add_url_rule("/hello", "hello", lambda: "hi")
    return app


def spans(worker: WorkerTracing, span_file: Path) -> list[Span]:
    assert worker.processor.force_flush(5000)
    return from_file(span_file) if span_file.exists() else []


def test_instrumenting_twice_is_harmless(worker: WorkerTracing, span_file: Path) -> None:
    app = hello_app()
    instrumentor = FlaskTracing(worker)
    observer = instrumentor.instrument(app)
    wrapped = app.wsgi_app
    hooks = (list(app.before_request_funcs[None]), list(app.teardown_request_funcs[None]))
    assert FlaskTracing(worker).instrument(app) is observer
    assert app.wsgi_app is wrapped  # not wrapped a second time
    assert (app.before_request_funcs[None], app.teardown_request_funcs[None]) == hooks
    assert app.test_client().get("/hello").status_code == 200
    assert [s.name for s in spans(worker, span_file)] == ["GET /hello"]  # one span, not two


def test_uninstrumenting_restores_the_wsgi_app_and_removes_the_hooks(
    worker: WorkerTracing, span_file: Path
) -> None:
    app = hello_app()
    FlaskTracing(worker).instrument(app)
    assert "wsgi_app" in app.__dict__ and INSTRUMENTED in app.extensions
    FlaskTracing.uninstrument(app)
    # Flask's own method again, inherited: not a copy left on the instance.
    assert "wsgi_app" not in app.__dict__
    assert app.wsgi_app == Flask.wsgi_app.__get__(app)
    assert not app.before_request_funcs.get(None) and not app.teardown_request_funcs.get(None)
    assert INSTRUMENTED not in app.extensions
    assert app.test_client().get("/hello").status_code == 200
    assert spans(worker, span_file) == []  # no longer traced
    FlaskTracing.uninstrument(app)  # idempotent


def test_uninstrumenting_puts_back_a_wsgi_app_set_before(worker: WorkerTracing) -> None:
    app = hello_app()
    middleware = app.wsgi_app
    app.wsgi_app = middleware  # e.g. a proxy-fix middleware, set on the instance
    FlaskTracing(worker).instrument(app)
    assert app.wsgi_app is not middleware
    FlaskTracing.uninstrument(app)
    assert app.wsgi_app is middleware


def test_an_app_can_be_instrumented_again_after_uninstrumenting(
    worker: WorkerTracing, span_file: Path
) -> None:
    app = hello_app()
    FlaskTracing(worker).instrument(app)
    FlaskTracing.uninstrument(app)
    FlaskTracing(worker).instrument(app)
    assert app.test_client().get("/hello").status_code == 200
    assert [s.name for s in spans(worker, span_file)] == ["GET /hello"]


def test_without_tracing_the_app_is_left_alone_and_says_so() -> None:
    app = hello_app()
    assert FlaskTracing(None).instrument(app) is None
    assert app.extensions[MODE] == Mode.OFF.value
    assert "wsgi_app" not in app.__dict__ and INSTRUMENTED not in app.extensions
