"""The one thing pyproject.toml cannot say: the timing core's compiled hot path.

``optional=True``: without a compiler (or Python headers) the build says so and goes
on, and the timing core runs its Python reference (``tracing.timing.native`` says so in
one line when a worker starts).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracing.timing._native",
            sources=["tracing/timing/_native.c"],
            extra_compile_args=["-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
