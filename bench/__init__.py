"""The benchmark: the shared pool vs dedicated pools, measured side by side, and the
separately measurable parts. Its flags live in the command package (`pricingctl/bench/`).

Every part runs as `pricingctl bench <part>`; a module here is never a command of its
own (the load generator and the timing-accuracy rig are child processes the parts
start). Module per idea:

- `schedule`: Poisson arrival times (the open-loop schedule);
- `traffic`: the requests the load generator sends (offers, rideshare quotes, batches);
- `loadgen`: the open-loop load generator, run as its own process (responses read
  with `pricing.upstream.http1`);
- `cpu`: CPU use of process trees from /proc;
- `stats`: per-kind summaries (percentiles from `tracing.readback.report`);
- `floor`: the upstream floor (the slowest of an offer's parallel upstream calls);
- `spans`: the hook that reads tracing attributes from an OTLP JSON-lines span file;
- `run`: the route config for `--workers N`; one stack + one load run; the interleaved
  shared/split comparison;
- `envoy_hop`, `io_capacity`, `tracing_overhead`, `http_client`, `suggest`, `soak`,
  `overload`, `routes_scale`: the separately measurable parts;
- `timing_accuracy`, `timing_cost`, `span_cost`, `log_cost`, `metrics_cost`: the gevent
  timing core against ground truth, and what the instrumentation costs a worker (no
  stack);
- `pool_app`, `clients`, `synth`: what a benchmark's pool serves beyond the service (its
  app entry, the other HTTP client libraries, the synthetic service), handed to the
  service's factory;
- `report`, `replot`, `plots`, `progress`: results.json and writing each part's files,
  rebuilding a report from a finished run, PNGs, the progress bar.
"""
