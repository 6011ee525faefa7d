"""What the integration tests share, apart from their fixtures (those are in conftest.py).

- `http`: one request to the stack or the simulator, a client bound to a stack, the
  simulator's control API, and one valid request to each endpoint.
- `load`: open-loop load (one connection a request), CPU hogs, and the figures of a run.
- `stack`: route configs derived from the committed one, the stack's processes and logs.
- `cli`: `pricingctl` as a user runs it, in a subprocess.
- `jaeger_api`, `browser`: reading traces back from Jaeger, by its API and its web UI.
- `podman`, `oci_runtime_no_rlimits`: containers; `schemathesis_hooks`: the fuzzer's checks.

The sample requests are in `tests.samples` (the unit tests send them too).
"""
