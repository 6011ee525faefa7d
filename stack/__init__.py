"""Starts and stops the real processes: upstream simulator, gunicorn pools,
Envoy and Jaeger, on loopback. Used by `pricingctl up`, the integration tests
and the benchmark, so there is exactly one way to launch the stack.
"""
