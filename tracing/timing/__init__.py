"""The gevent timing core: split each outbound call of a greenlet into network time,
scheduling delay (ready, but waiting for the hub) and blocked time, and name the
greenlets that ran meanwhile.

Usable by any gevent program: it imports neither OpenTelemetry nor Flask (a test
imports it with both blocked). Entry points: ``instrumentor.GeventTimingInstrumentor``
installs the hooks; ``call_timing.measure_call`` measures one call; ``labels`` names
the greenlets. Hooks never break the call they observe (``hook_errors``).
"""
