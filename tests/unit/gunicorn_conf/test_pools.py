"""The gunicorn settings each pool's config module renders from routes.toml, exactly
(a change to a pool shows up here in review), and the shared post_fork hook."""

from __future__ import annotations

import importlib
import logging
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from gunicorn.config import Config

from routing.model import RouteConfig
from routing.write import write_routes
from toolkit.contract import ROUTES_ENV

HOOKS = (
    *("child_exit", "on_starting", "post_fork", "post_worker_init", "worker_exit"),
    *("pre_fork", "when_ready"),
)

COMMON = {
    "worker_class": "gunicorn_conf.worker.PoolWorker",
    "timeout": 30,
    "graceful_timeout": 10,
    "accesslog": "-",
    "logger_class": "gunicorn_conf.json_logs.JsonLogger",
    "errorlog": "-",
    "loglevel": "info",
    "limit_request_line": 8190,
    "limit_request_field_size": 32 * 1024,
    "forwarded_allow_ips": "*",
    "secure_scheme_headers": {"X-FORWARDED-PROTO": "https"},
    "control_socket_disable": True,
}

SETTINGS = {
    "cpu": {
        **COMMON,
        "wsgi_app": "pricing:create_app(pool='cpu')",
        "bind": ["127.0.0.1:8101"],
        "workers": 2,
        "worker_connections": 1,
        "keepalive": 0,
        "backlog": 64,
        "proc_name": "pricing-cpu",
        "raw_env": ["PRICING_POOL=cpu"],
    },
    "io": {
        **COMMON,
        "wsgi_app": "pricing:create_app(pool='io')",
        "bind": ["127.0.0.1:8102"],
        "workers": 2,
        "worker_connections": 1000,
        "keepalive": 30,
        "backlog": 2000,
        "proc_name": "pricing-io",
        "raw_env": ["PRICING_POOL=io"],
    },
    "shared": {
        **COMMON,
        "wsgi_app": "pricing:create_app(pool='shared')",
        "bind": ["127.0.0.1:8103"],
        "workers": 4,
        "worker_connections": 1000,
        "keepalive": 30,
        "backlog": 4000,
        "proc_name": "pricing-shared",
        "raw_env": ["PRICING_POOL=shared"],
    },
}


def config_module(pool: str) -> ModuleType:
    """The pool's config module, freshly executed (it reads routes.toml on import)."""
    name = f"gunicorn_conf.{pool}"
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def settings_of(module: ModuleType) -> dict[str, Any]:
    return {
        k: v
        for k, v in vars(module).items()
        if not k.startswith("_") and k not in (*HOOKS, "settings_for")
    }


@pytest.mark.parametrize("pool", sorted(SETTINGS))
def test_each_pool_renders_exactly_its_settings(pool: str) -> None:
    module = config_module(pool)
    assert settings_of(module) == SETTINGS[pool]
    assert all(callable(getattr(module, hook)) for hook in HOOKS)


@pytest.mark.parametrize("pool", sorted(SETTINGS))
def test_gunicorn_accepts_every_setting(pool: str) -> None:
    config = Config()
    for key, value in settings_of(config_module(pool)).items():
        config.set(key, value)  # gunicorn's own validators
    assert config.worker_class_str == "gunicorn_conf.worker.PoolWorker"
    from gunicorn.workers.ggevent import GeventWorker

    assert issubclass(config.worker_class, GeventWorker)


def test_settings_follow_the_route_config_file(
    routes: RouteConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    io = routes.pool("io")
    more = replace(io, workers=3, binds=(replace(io.bind, port=8112),))
    pools = tuple(more if p.name == "io" else p for p in routes.pools)
    shared = replace(
        routes.shared, workers=sum(p.workers for p in pools)
    )  # as the loader derives it
    written = write_routes(replace(routes, pools=pools, shared=shared), tmp_path / "routes.toml")
    monkeypatch.setenv(ROUTES_ENV, written.source)
    io = settings_of(config_module("io"))
    assert (io["bind"], io["workers"], io["backlog"]) == (["127.0.0.1:8112"], 3, 3000)
    assert settings_of(config_module("shared"))["workers"] == 5  # cpu 2 + io 3


def test_post_fork_lowers_priority_and_sets_tracing_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from gunicorn_conf import common
    from tracing import server

    niced: list[int] = []
    traced: list[tuple[str, server.Sampling]] = []
    monkeypatch.setenv("PRICING_POOL", "cpu")
    monkeypatch.setattr(common.os, "nice", niced.append)
    monkeypatch.setattr(
        server, "setup_worker", lambda pool, sampling, **_: traced.append((pool, sampling))
    )
    worker = SimpleNamespace(pid=123, log=logging.getLogger("test.gunicorn"))
    common.post_fork(server=None, worker=worker)
    assert niced == [5]  # [pools.cpu] nice = 5
    ((pool, sampling),) = traced
    assert pool == "cpu"
    # Sampling from routes.toml: Envoy's percentage, and each route's slow threshold
    # (half its timeout unless it sets slow_ms).
    assert sampling.ratio == pytest.approx(0.01)
    assert sampling.slow_threshold_s("GET /v1/offers/bike") == pytest.approx(0.25)
    assert sampling.slow_threshold_s("POST /v1/offers/rideshare") == pytest.approx(1.5)


def test_worker_exit_flushes_the_metrics_the_request_path_kept_in_process() -> None:
    """A graceful stop loses no counts: worker_exit folds in what the last periodic
    flush did not."""
    from gunicorn_conf import common
    from tracing.metrics import pool_metrics

    metrics = pool_metrics()

    def exported() -> float:
        (family,) = metrics.route_requests.collect()
        return sum(
            s.value
            for s in family.samples
            if s.name.endswith("_count") and s.labels["http_route"] == "/exit"
        )

    metrics.flush()
    before = exported()
    metrics.observe_request("GET", "/exit", 200, 0.01)
    assert exported() == before  # kept in process until a flush
    common.worker_exit(server=None, worker=SimpleNamespace(pid=123))
    assert exported() == before + 1


def test_post_worker_init_freezes_the_start_up_heap_and_collects_young_objects_less_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gc

    from gunicorn_conf import common

    frozen: list[bool] = []
    thresholds: list[tuple[int, ...]] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(gc, "get_threshold", lambda: (700, 10, 10))
    monkeypatch.setattr(gc, "set_threshold", lambda *t: thresholds.append(t))
    common.post_worker_init(SimpleNamespace(log=logging.getLogger("test")))
    assert frozen == [True]
    # Young objects are collected less often; the older generations keep their ratios.
    assert thresholds == [(common.GC_YOUNG_THRESHOLD, 10, 10)]
    assert common.GC_YOUNG_THRESHOLD > 700
