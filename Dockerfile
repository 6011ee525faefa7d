# pricingservice: one image for every pool (and the upstream simulator).
#
#   docker build -t pricingservice .
#   docker run -e PRICING_POOL=io  -p 8102:8102 pricingservice     # the io pool
#   docker run pricingservice cpu                                    # the cpu pool
#   docker run pricingservice simulator                              # the upstream simulator
#
# NOT BUILT on the project's machines (no Docker engine there): it is checked with
# hadolint in the tests (tests/unit/deploy/test_dockerfile.py), and the compose file
# and Kubernetes manifests that use it are validated offline. See the README,
# "Running beyond one machine".

# --- build: a venv from the runtime lock (wheels only), and the project's wheel ------
# The project's own code is not installed into the venv: it runs from /app (PYTHONPATH).
# The project's wheel is built here for the one compiled module it carries, the timing
# core's hot path (tracing/timing/_native.c); the runtime stage copies that module and
# gets no compiler.
FROM python:3.11.15-slim-trixie AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ONLY_BINARY=:all:

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
COPY requirements.lock .
RUN pip install --require-hashes -r requirements.lock

# The compiler exists only in this stage, so its exact version is not pinned (it never
# reaches the image; the wheel's build fails loudly if the C code does not compile).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml setup.py ./
COPY tracing ./tracing
# PIP_ONLY_BINARY=:none: here: this is the one thing built from source.
RUN PIP_ONLY_BINARY=:none: pip wheel --no-deps --wheel-dir /wheels . \
    && python -m zipfile -e /wheels/pricingservice-*.whl /wheels/unpacked

# --- runtime: the venv and the route config, run as a user without privileges ------
FROM python:3.11.15-slim-trixie

# VERSION: pyproject.toml's (a test checks the two agree); REVISION and CREATED: the
# build's commit and time, which only the build knows (--build-arg).
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="pricingservice" \
      org.opencontainers.image.description="Flask pricing service: gunicorn+gevent pools behind Envoy" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11.15-slim-trixie"

RUN groupadd --system --gid 10001 pricing \
    && useradd --system --uid 10001 --gid pricing --no-create-home --shell /usr/sbin/nologin pricing

COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY routes.toml simulator.toml ./
COPY pricing ./pricing
COPY routing ./routing
COPY tracing ./tracing
# The compiled hot path from the wheel (a missing file fails the build: no silent
# fallback to the Python reference in the image).
COPY --from=build /wheels/unpacked/tracing/timing/_native*.so ./tracing/timing/
COPY simulator ./simulator
COPY gunicorn_conf ./gunicorn_conf
COPY deploy/container/entrypoint.sh /usr/local/bin/pricing-entrypoint
# Byte-compiled once here (pip already compiled the venv): the root file system is
# read-only in Kubernetes, so nothing could be cached at run time, and every worker
# would compile every module at each start. unchecked-hash: the sources never change.
RUN python -m compileall -q -j 0 --invalidation-mode unchecked-hash /app

# PRICING_POOL: which pool this container runs (a pool of routes.toml, or `simulator`);
# PRICING_PORT: where it listens inside the container (0.0.0.0: its own network
# namespace; the published port or the Service decides what is reachable).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PRICING_ROUTES=/app/routes.toml \
    PRICING_POOL=io \
    PRICING_PORT=8000 \
    OTEL_RESOURCE_ATTRIBUTES="service.version=${VERSION}"

USER 10001:10001
EXPOSE 8000

# The pool's liveness path ([meta].healthz); the simulator answers it too.
HEALTHCHECK --interval=5s --timeout=2s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ['PRICING_PORT'], timeout=2)"]

ENTRYPOINT ["pricing-entrypoint"]
CMD []
