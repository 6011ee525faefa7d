"""What the unit tests share, apart from their fixtures (those are in the conftest.py
files): a fake upstream gateway, the reader of problem replies, the switch between the
compiled and the Python timing path. The sample requests are in `tests.samples`."""
