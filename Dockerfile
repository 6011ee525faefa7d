# pricingservice: one image for every pool (and the upstream simulator).
#
#   docker build -t pricingservice .
#   docker run -e PRICING_POOL=io  -p 8102:8102 pricingservice     # the io pool
#   docker run pricingservice cpu                                    # the cpu pool
#   docker run pricingservice simulator                              # the upstream simulator
#
# Checked with hadolint (tests/unit/routing/test_container.py); built and run under
# podman, offline, in tests/integration/test_containers.py. See the README, "Running
# beyond one machine".

# BASE: any image with Python 3.11 (python3) and the venv module. The tests build on a
# local Debian bookworm image instead (tests/integration/test_containers.py).
ARG BASE=python:3.11.15-slim-trixie
# checkov:skip=CKV_DOCKER_7: the FROMs name build arguments, which checkov does not resolve: BASE defaults to a release tag, WHEELHOUSE to scratch or a local build context
# WHEELHOUSE: where pip finds the wheels. Default: nowhere (an empty stage), and pip
# downloads from PyPI. Offline, from wheels built on the host from the same lock:
#   pip wheel --require-hashes --only-binary :all: -r requirements.lock -w wheelhouse
#   docker build --build-context wheelhouse=wheelhouse \
#     --build-arg WHEELHOUSE=wheelhouse --build-arg PIP_NO_INDEX=1 .
# pip checks every wheel against the lock's hashes either way.
ARG WHEELHOUSE=scratch
FROM ${WHEELHOUSE} AS wheelhouse

# --- build: a venv from the runtime lock (wheels only), and the project's wheel ------
# The project's own code is not installed into the venv: it runs from /app (PYTHONPATH).
# The project's wheel is built here for the compiled modules it carries, the timing
# core's hot path (tracing/timing/csrc/) and the call observer (tracing/_client_native.c);
# the runtime stage copies those two and gets no compiler.
FROM ${BASE} AS build

# PIP_NO_INDEX=1: install only from the wheelhouse (a build that cannot reach PyPI).
ARG PIP_NO_INDEX=0
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ONLY_BINARY=:all: \
    PIP_FIND_LINKS=/wheelhouse

RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
COPY requirements.lock .
RUN --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    pip install --require-hashes -r requirements.lock

COPY pyproject.toml setup.py ./
COPY tracing ./tracing
# The project's wheel: from the wheelhouse when it carries one (an offline build: the
# wheel was built where a compiler and the network are), otherwise built here. The
# compiler exists only in this stage, so its version is not pinned (it never reaches
# the image; the build fails loudly if the C code does not compile).
# PIP_ONLY_BINARY=:none: for the one thing built from source.
# hadolint ignore=DL3008
RUN --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    mkdir -p /wheels \
    && if ls /wheelhouse/pricingservice-*.whl >/dev/null 2>&1; then \
        cp /wheelhouse/pricingservice-*.whl /wheels/; \
    else \
        apt-get update \
        && apt-get install -y --no-install-recommends gcc libc6-dev \
        && rm -rf /var/lib/apt/lists/* \
        && PIP_ONLY_BINARY=:none: pip wheel --no-deps --wheel-dir /wheels .; \
    fi \
    && python -m zipfile -e /wheels/pricingservice-*.whl /wheels/unpacked

# --- runtime: the venv and the route config, run as a user without privileges ------
FROM ${BASE}
ARG BASE

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
      org.opencontainers.image.base.name="${BASE}"

RUN groupadd --system --gid 10001 pricing \
    && useradd --system --uid 10001 --gid pricing --no-create-home --shell /usr/sbin/nologin pricing

COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY routes.toml simulator.toml ./
COPY pricing ./pricing
COPY routing ./routing
COPY tracing ./tracing
COPY toolkit ./toolkit
# The compiled hot path from the wheel (a missing file fails the build: no silent
# fallback to the Python reference in the image).
COPY --from=build /wheels/unpacked/tracing/timing/_native*.so ./tracing/timing/
COPY --from=build /wheels/unpacked/tracing/_client_native*.so ./tracing/
COPY --from=build /wheels/unpacked/tracing/_export_native*.so ./tracing/
COPY --from=build /wheels/unpacked/tracing/_otlp_native*.so ./tracing/
COPY simulator ./simulator
COPY gunicorn_conf ./gunicorn_conf
COPY deploy/container/entrypoint.sh /usr/local/bin/pricing-entrypoint
# Byte-compiled once here (pip already compiled the venv): the root file system is
# read-only in Kubernetes, so nothing could be cached at run time, and every worker
# would compile every module at each start. unchecked-hash: the sources never change.
RUN python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash /app

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
