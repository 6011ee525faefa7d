"""`pricingctl`: the one command line. It parses arguments and calls down into
`routing`, `stack`, `bench` and `tracing`; nothing below imports it, and what a
lower layer needs from above (the app's endpoints for `routes check`) is handed in.

One module per sub-command: `routes`, `up`, `traces`, `bench`; `main` wires them.
"""
