"""Operating a live stack under load, through the real commands: `pricingctl reload`
replaces every worker of every pool and `pricingctl routes apply` moves an endpoint
to another pool, each with zero failed requests; a deployment that cannot boot or a
config Envoy refuses is refused in one line, and nothing changes.

The stack is started by the test (a `Stack`); its pid file names the test process
as the launcher, so the commands find it as they find one `pricingctl up` started.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from routing.model import Layout, RouteConfig
from stack.launch import Stack
from stack.ops import exclusive
from stack.procfs import children
from stack.state import Running, process_start, write_state
from tests.integration.support.cli import pricingctl
from tests.integration.support.http import FAST_MS, fixed_latency, reset_upstreams
from tests.integration.support.load import (
    Background,
    Outcome,
    Tally,
    offer_request,
    ride_request,
)
from tests.integration.support.stack import derived_config

pytestmark = pytest.mark.integration

# Every fourth request a rideshare POST (cpu pool), the others bike and scooter GETs.
RATE, COUNT = 20.0, 2000  # bounded above what any one operation takes
SCOOTER_TO_CPU = {
    'endpoint = "offers.scooter"\npath = "/v1/offers/scooter"\nmethods = ["GET"]\npool = "io"': (
        'endpoint = "offers.scooter"\npath = "/v1/offers/scooter"\nmethods = ["GET"]\npool = "cpu"'
    )
}


@pytest.fixture(scope="module")
def stack(routes: RouteConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with Stack.on_free_ports(routes, Layout.SPLIT, tmp_path_factory.mktemp("ops")) as stack:
        fixed_latency(stack, FAST_MS)
        yield stack
        reset_upstreams(stack)


def mixed(i: int) -> bytes:
    if i % 4 == 0:
        return ride_request(i)
    return offer_request(i, "scooter" if i % 4 in (1, 3) else "bike")


def is_scooter(o: Outcome) -> bool:
    return o.index % 4 in (1, 3)


def run_under_load(stack: Stack, *args: str) -> tuple[subprocess.CompletedProcess[str], Tally]:
    """`pricingctl ARGS` while the mixed load runs; the load's tally up to the end."""
    with Background(stack.url, mixed, rate_per_s=RATE, count=COUNT, timeout_s=15) as load:
        time.sleep(1.0)
        started = time.monotonic()
        done = pricingctl(*args, "--run-dir", str(stack.run_dir))
        time.sleep(1.0)  # load after the command too, then the sender stops
        load.stop()
    print(f"\n{time.monotonic() - started:.1f} s under load")
    return done, Tally(load.outcomes)


def assert_no_failure(tally: Tally, what: str) -> None:
    failed = [o for o in tally.outcomes if o.status != 200]
    assert failed == [], tally.summary(what) + f"; failed {failed[:5]}"


def test_reload_all_replaces_every_worker_under_load_without_a_failed_request(
    stack: Stack,
) -> None:
    before = {p: set(children(stack.procs[f"pool-{p}"].pid)) for p in ("io", "cpu")}
    done, tally = run_under_load(stack, "reload", "all")
    print(f"\n{done.stdout}{tally.summary('mixed load across `pricingctl reload all`')}")
    assert done.returncode == 0, done.stderr
    progress = [line for line in done.stdout.splitlines() if " serving (" in line]
    assert len(progress) == sum(len(workers) for workers in before.values())  # a line each
    for pool, old in before.items():
        now = set(children(stack.procs[f"pool-{pool}"].pid))
        assert len(now) == len(old) and not now & old, (pool, old, now)
    assert len(tally.outcomes) > 20
    assert_no_failure(tally, "reload all")


def test_a_worker_that_cannot_boot_is_refused_and_the_old_ones_keep_serving(
    stack: Stack,
) -> None:
    running = stack.running()
    routes_file = running.pool_routes["io"]
    good = routes_file.read_text()
    before = children(stack.procs["pool-io"].pid)
    routes_file.write_text(good.replace('pool = "io"', 'pool = "gpu"', 1))
    try:
        done = pricingctl("reload", "io", "--run-dir", str(stack.run_dir))
    finally:
        routes_file.write_text(good)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "reload io: a new worker would not boot" in done.stderr
    assert "pool 'gpu' is not declared" in done.stderr
    assert "the old workers keep serving" in done.stderr
    assert children(stack.procs["pool-io"].pid) == before


def test_routes_apply_refuses_an_invalid_config_in_one_line(stack: Stack, tmp_path: Path) -> None:
    version = stack.admin.listener_version()
    files = {p: path.read_text() for p, path in stack.running().pool_routes.items()}

    def apply(replace: dict[str, str]) -> subprocess.CompletedProcess[str]:
        (tmp_path / "routes.toml").unlink(missing_ok=True)
        config = derived_config(tmp_path, replace)
        return pricingctl(
            "routes", "--config", config.source, "apply", "--run-dir", str(stack.run_dir)
        )

    more_workers = apply({"workers = 2": "workers = 3"})
    assert more_workers.returncode == 1
    assert more_workers.stderr == (
        "pricingctl: routes apply: pool 'cpu' has new settings; pool settings change with "
        "`pricingctl down` and `up`, routes with apply\n"
    )
    unknown = apply({'endpoint = "offers.scooter"': 'endpoint = "offers.skateboard"'})
    assert unknown.returncode == 1  # a bad config: 1 (2 is for bad flags)
    assert unknown.stderr.count("\n") == 1, unknown.stderr
    assert "offers.scooter" in unknown.stderr and "nothing changed" in unknown.stderr
    # Nothing changed: Envoy's config, and every pool's routes.
    assert stack.admin.listener_version() == version
    assert {p: path.read_text() for p, path in stack.running().pool_routes.items()} == files


# --- a second operator --------------------------------------------------------------


def test_a_second_apply_or_reload_is_refused_while_one_runs(stack: Stack) -> None:
    running = stack.running()
    version = stack.admin.listener_version()
    with exclusive(running, "routes apply"):
        applied = pricingctl("routes", "apply", "--run-dir", str(stack.run_dir))
        reloaded = pricingctl("reload", "io", "--run-dir", str(stack.run_dir))
    for done in (applied, reloaded):
        assert done.returncode == 1
        assert done.stderr.count("\n") == 1, done.stderr
        assert f"`pricingctl routes apply` (pid {os.getpid()}) is changing this stack" in (
            done.stderr
        )
    assert stack.admin.listener_version() == version
    # Once the first is done, the next one runs.
    again = pricingctl("routes", "apply", "--run-dir", str(stack.run_dir))
    assert again.returncode == 0, again.stderr


def test_routes_apply_applies_the_config_the_stack_was_started_with(
    stack: Stack, tmp_path: Path
) -> None:
    source = stack.running().source_config
    assert source is not None and source.exists()
    plain = pricingctl("routes", "apply", "--run-dir", str(stack.run_dir))
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines()[0] == f"routes apply: {source}"
    copy = tmp_path / "same.toml"
    copy.write_text(source.read_text())
    given = pricingctl("routes", "apply", "--config", str(copy), "--run-dir", str(stack.run_dir))
    assert given.returncode == 0, given.stderr
    assert given.stdout.splitlines()[0] == f"routes apply: {copy}"


# Last of the tests on the module's stack: it leaves the stack on the moved config, so
# an apply after it would move the endpoint back (a reload of every pool, ~30 s); the
# applies above find nothing to change.
def test_routes_apply_moves_an_endpoint_under_load_without_a_failed_request(
    stack: Stack, tmp_path: Path
) -> None:
    moved = derived_config(tmp_path, SCOOTER_TO_CPU)
    done, tally = run_under_load(stack, "routes", "--config", moved.source, "apply")
    scooters = [o for o in sorted(tally.outcomes, key=lambda o: o.index) if is_scooter(o)]
    pools = [o.headers.get("x-pricing-pool") for o in scooters]
    print(
        f"\n{done.stdout}{tally.summary('mixed load across `pricingctl routes apply`')}; "
        f"scooter served by io {pools.count('io')}, cpu {pools.count('cpu')}"
    )
    assert done.returncode == 0, done.stderr
    assert "offers.scooter moves from io to cpu" in done.stdout
    assert_no_failure(tally, "routes apply")
    # The endpoint flips once, from the old pool to the new one.
    assert pools[0] == "io" and pools[-1] == "cpu", pools
    flip = pools.index("cpu")
    assert set(pools[flip:]) == {"cpu"}, pools
    # The other endpoints stay where they were.
    bikes = [o for o in tally.outcomes if o.index % 4 == 2]
    assert {o.headers.get("x-pricing-pool") for o in bikes} == {"io"}


# --- a stale pid file ----------------------------------------------------------------


def test_down_kills_nothing_a_stale_pid_file_names_that_is_not_ours(tmp_path: Path) -> None:
    """stack.json names pids whose processes have gone and whose numbers the kernel
    gave to others: `down` checks each one's start time and leaves those alone."""
    others = [subprocess.Popen(["sleep", "300"], start_new_session=True) for _ in range(2)]
    try:
        launcher, pool = others

        def state(started: dict[int, int]) -> None:
            write_state(
                Running(
                    run_dir=tmp_path,
                    layout=Layout.SPLIT,
                    launcher_pid=launcher.pid,
                    url="http://127.0.0.1:1",
                    admin_url="http://127.0.0.1:1",
                    pids={"pool-io": pool.pid},
                    config_path=tmp_path / "active.toml",
                    pool_routes={},
                    pool_env={},
                    xds_dir=tmp_path,
                    started=started,
                )
            )

        # Recorded start times that are not these processes': not ours.
        state({p.pid: (process_start(p.pid) or 0) + 1 for p in others})
        done = pricingctl("down", "--run-dir", str(tmp_path), timeout_s=60)
        assert done.returncode == 0, done.stderr
        assert "pool-io" in done.stderr and "no longer ours" in done.stderr
        assert launcher.poll() is None and pool.poll() is None
        # The control: the same file with their real start times stops both.
        state({p.pid: process_start(p.pid) or 0 for p in others})
        done = pricingctl("down", "--run-dir", str(tmp_path), timeout_s=60)
        assert done.returncode == 0, done.stderr
        assert launcher.wait(timeout=30) is not None and pool.wait(timeout=30) is not None
    finally:
        for p in others:
            if p.poll() is None:
                p.kill()
                p.wait()
