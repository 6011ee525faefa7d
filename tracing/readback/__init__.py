"""Tracing's results read back, outside the pools: spans from Jaeger or the span file
(``spans``), where one request's time went (``breakdown``), per-route summaries and
culprits (``report``), and what each route costs the hub (``usage``).

Nothing here runs inside a worker: `pricingctl traces`, `routes suggest` and the
benchmark import it; the per-worker runtime (``tracing`` and ``tracing.timing``) never
does (tests/unit/test_layers.py).
"""
