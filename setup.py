"""The one thing pyproject.toml cannot say: the compiled hot path, four extensions.

- ``tracing.timing._native``: the timing core's, one C file per Python module it follows
  (``tracing/timing/csrc/``, sharing ``timing.h``);
- ``tracing._client_native``: ``tracing.client``'s call observer, in the OpenTelemetry
  wiring's layer; it takes what it needs of the first through the C API capsule the core
  exports (``tracing/timing/csrc/capi.h``), so nothing is linked across;
- ``tracing._export_native`` and ``tracing._otlp_native``: the span encoders of
  ``tracing.export`` (OTLP/JSON, the span file) and ``tracing.otlp_protobuf`` (the OTLP
  exporters), on the exporter thread for every sampled span; each on its own, sharing
  ``tracing/_encode.h``.

``optional=True``: without a compiler (or Python headers) the build says so and goes
on, and the timing core runs its Python reference (``tracing.timing.native`` says so in
one line when a worker starts).
"""

from pathlib import Path

from setuptools import Extension, setup

# -fvisibility=hidden: the functions the timing core's files share stay inside the module
# (only PyInit_* is exported), and calls between them need no PLT.
CFLAGS = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-fvisibility=hidden"]
TIMING_C = Path("tracing/timing/csrc")

setup(
    ext_modules=[
        Extension(
            "tracing.timing._native",
            sources=sorted(str(path) for path in TIMING_C.glob("*.c")),
            depends=sorted(str(path) for path in TIMING_C.glob("*.h")),
            extra_compile_args=CFLAGS,
            optional=True,
        ),
        Extension(
            "tracing._client_native",
            sources=["tracing/_client_native.c"],
            depends=[str(TIMING_C / "capi.h")],
            extra_compile_args=CFLAGS,
            optional=True,
        ),
        *(
            Extension(
                f"tracing.{name}",
                sources=[f"tracing/{name}.c"],
                depends=["tracing/_encode.h"],
                extra_compile_args=CFLAGS,
                optional=True,
            )
            for name in ("_export_native", "_otlp_native")
        ),
    ]
)
