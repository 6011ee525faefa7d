"""`pricingctl bench`: flags and defaults; the parts themselves live in `bench`.

    pricingctl bench [--quick] [--duration S] [--repeats N] [--workers N] [--rates cpu=R,offers=R]
    pricingctl bench envoy-hop [--quick] ...
    pricingctl bench io-capacity [--quick] ...
    pricingctl bench tracing-overhead [--quick] ...
    pricingctl bench http-client [--quick] [--clients ours,geventhttpclient,urllib3] ...
    pricingctl bench timing-accuracy [--quick] [--calls N] [--hogs N] ...
    pricingctl bench timing-cost [--quick] [--rounds N] [--repeat N]
    pricingctl bench span-cost [--quick] [--requests N] [--repeat N] [--profile]
    pricingctl bench log-cost [--quick] [--n N]
    pricingctl bench metrics-cost [--quick] [--n N]
    pricingctl bench instructions [--quick] [--offers N] [--warmup N] [--repeats N] [--sampled]
    pricingctl bench soak [--minutes M] [--kill-every-s S] ...
    pricingctl bench faults [--quick] [--faults F,F] [--after S] ...
    pricingctl bench overload [--quick] [--multiples X,X] [--pools io,cpu] ...
    pricingctl bench suggest [--quick] [--rates offers=R,cpu=R,batch=R] ...
    pricingctl bench routes-scale [--quick] [--routes N] [--seed S]
    pricingctl bench baseline [--quick] [--offer-rates R,R] [--no-capacity] ...

Every part runs through one skeleton (`skeleton.measure_and_report`): machine check,
measurement, results written by the part, one summary printed, one way to fail. The
flags the parts share are in `flags`; each family of parts has its module: `compare`
(no part), `capacity`, `overhead`, `stress`, `timing`, `cost`, `routes`.

Exit codes: 0 measured (targets met or not: they are reported, not enforced),
1 the benchmark could not run (a bad route config included), 2 bad flags, 130
interrupted (143 on SIGTERM).
"""

from __future__ import annotations

from pricingctl.bench.baseline import baseline_parser
from pricingctl.bench.capacity import envoy_hop_parser, io_capacity_parser
from pricingctl.bench.compare import compare_flags
from pricingctl.bench.cost import (
    instructions_parser,
    log_cost_parser,
    metrics_cost_parser,
    span_cost_parser,
)
from pricingctl.bench.flags import Parts
from pricingctl.bench.overhead import http_client_parser, tracing_overhead_parser
from pricingctl.bench.routes import routes_scale_parser, suggest_parser
from pricingctl.bench.stress import faults_parser, overload_parser, soak_parser
from pricingctl.bench.timing import timing_accuracy_parser, timing_cost_parser


def add_parser(subparsers: Parts) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="measure shared vs split pools side by side (results.json + plots)",
        description="Without PART: start the stack in the shared and the split layout, drive "
        "both with the same open-loop load, and write results.json and PNG plots to --out. "
        "With PART: measure that part on its own.",
    )
    compare_flags(bench)
    # The sub-parsers are of the root's one-line-error class, like this one.
    sub = bench.add_subparsers(dest="bench_command", metavar="PART")
    envoy_hop_parser(sub)
    io_capacity_parser(sub)
    tracing_overhead_parser(sub)
    overload_parser(sub)
    http_client_parser(sub)
    timing_accuracy_parser(sub)
    soak_parser(sub)
    faults_parser(sub)
    suggest_parser(sub)
    timing_cost_parser(sub)
    span_cost_parser(sub)
    log_cost_parser(sub)
    metrics_cost_parser(sub)
    instructions_parser(sub)
    routes_scale_parser(sub)
    baseline_parser(sub)
