"""Run by Python's `site` at start-up when this directory is on PYTHONPATH: the opt-in
of `bench.heapwatch` (it does nothing unless its environment variable is set)."""

from bench.heapwatch import install

install()
