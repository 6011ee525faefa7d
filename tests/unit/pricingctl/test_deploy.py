"""`pricingctl deploy`: the committed compose and Kubernetes folders are what the route
config renders; `--check` fails on a stale one; `size` sizes from measured capacities."""

from __future__ import annotations

from pathlib import Path

import pytest

from pricingctl.main import main


@pytest.mark.parametrize("target", ["kubernetes", "compose"])
def test_committed_renderings_are_up_to_date(
    target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["deploy", "render", target, "--check"]) == 0, capsys.readouterr().err


def test_check_fails_on_a_stale_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "k8s"
    assert main(["deploy", "render", "kubernetes", "-o", str(out)]) == 0
    assert main(["deploy", "render", "kubernetes", "-o", str(out), "--check"]) == 0
    (out / "pool-io.yaml").write_text("# edited by hand\n")
    assert main(["deploy", "render", "kubernetes", "-o", str(out), "--check"]) == 1
    assert "pool-io.yaml" in capsys.readouterr().err
    # A target rate re-sizes the replicas: the committed folder is then stale.
    assert main(["deploy", "render", "kubernetes", "--check", "--offers-per-s", "10000"]) == 1


def test_size_prints_replicas_per_pool(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "size", "--offers-per-s", "10000"]) == 0
    out = capsys.readouterr().out
    assert "1000 quotes/s" in out  # 10 % of the offers by default
    assert "io: 10000 req/s" in out and "cpu: 1000 req/s" in out


def test_up_refuses_a_non_loopback_replica_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from routing.load import DEFAULT_ROUTES_PATH

    text = DEFAULT_ROUTES_PATH.read_text().replace(
        'bind = "127.0.0.1:8102"', 'bind = ["127.0.0.2:8102", "10.0.0.3:8102"]', 1
    )
    config = tmp_path / "routes.toml"
    config.write_text(text)
    assert main(["up", "--config", str(config)]) == 1  # a bad config: 1 (2 is for bad flags)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[pools.io].bind must be a loopback address" in err
