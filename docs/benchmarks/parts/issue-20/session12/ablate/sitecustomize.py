"""Measurement harness, not product code: switch one part of the timing core off in the
io workers of the *traced* stack of a paired `pricingctl bench tracing-overhead` run, so
that default - off, measured at once against an untraced stack, says what that part
costs. Put this directory on PYTHONPATH and name the parts in ABLATE (comma-separated):

- ``metrics``: no timing histograms observed (PoolMetrics.observe_timing / observe_call),
  so the once-a-second flush has none of their series to write either;
- ``runqueue``: no run-queue clock (no CPU-wait split, no schedstat reads);
- ``hubblock``: no hub-block watcher thread and no loop-lag timer;
- ``tracer_off``: the switch tracer installed but disabled (greenlet still calls it);
- ``tracer_gone``: the switch tracer taken out of greenlet's trace hook altogether;
- ``none``: nothing (the same harness, for the baseline).

Each part removed breaks what depends on it (culprits, CPU wait, hub-block logs): the
figures are costs, not a configuration anyone should run.
"""

import os
import sys

_PARTS = {p for p in os.environ.get("ABLATE", "").split(",") if p}


def _io_worker_of_traced_stack() -> bool:
    return os.environ.get("PRICING_TRACING") == "full" and any(
        "gunicorn_conf" in a and "io" in a.rpartition("gunicorn_conf")[2] for a in sys.argv
    )


def _ablate() -> None:
    if not _io_worker_of_traced_stack():
        return
    if "metrics" in _PARTS:
        import tracing.metrics as m

        m.PoolMetrics.observe_timing = lambda *a, **k: None
        m.PoolMetrics.observe_call = lambda *a, **k: None
    if "runqueue" in _PARTS:
        import tracing.timing.runqueue as rq

        rq.RunQueueClock.open = classmethod(lambda cls, *a, **k: None)
    if "hubblock" in _PARTS:
        import tracing.timing.hub_block as hb
        import tracing.timing.loop_lag as ll

        hb.HubBlockDetector.start = lambda self: None
        ll.LoopLagGauge.start = lambda self: None
    if _PARTS & {"tracer_off", "tracer_gone"}:
        import greenlet

        import tracing.timing.switch_tracer as st

        install = st.SwitchTracer.install

        def ablated_install(self, *a, **k):
            install(self, *a, **k)
            if "tracer_gone" in _PARTS:
                greenlet.settrace(self._previous)
            elif self._native is not None:
                self._native.enabled = False

        st.SwitchTracer.install = ablated_install


if _PARTS:
    # gunicorn forks its workers from the master: ablate in each worker, before post_fork
    # sets the tracing up.
    os.register_at_fork(after_in_child=_ablate)
