"""Upstream simulator: the services pricing calls (vehicles, routing, promotions), faked in
one loopback process with configurable latency and faults, for tests and benchmarks.
It must stay cheap (tens of microseconds of CPU per request) and never listen off loopback.
"""
