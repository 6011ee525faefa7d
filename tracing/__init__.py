"""Trace timing for the gevent pools: split every upstream call into network time and
event-loop scheduling delay, and name the greenlets that caused the delay.

Rule for everything in this package: tracing never breaks a request. Hooks swallow their
own errors, log them (rate-limited) and let the call carry on unmeasured.
"""
