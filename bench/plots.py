"""PNG plots (matplotlib, Agg: no display needed) a person would rather look at than read.

matplotlib is a dev-only package (requirements-dev.lock): without it every plot is
skipped, said once in one line on stderr, and the results files are written as usual.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from bench.cpu import OTHER
from tracing.readback.breakdown import UNEXPLAINED

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker
except ImportError:
    plt = ticker = None  # type: ignore[assignment]

_F = TypeVar("_F", bound=Callable[..., Path | None])
_told = [False]


def _needs_matplotlib(plot: _F) -> _F:
    """Without matplotlib the plot is skipped (returns None); the first skip says why."""

    @functools.wraps(plot)
    def wrapper(*args: Any, **kwargs: Any) -> Path | None:
        if plt is None:
            if not _told[0]:
                _told[0] = True
                print(
                    "bench: no PNG plots: matplotlib is not installed (it is in the dev "
                    "lock: make setup-dev); the JSON results are written",
                    file=sys.stderr,
                )
            return None
        return plot(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


COLORS = {
    "shared": "#d1495b",
    "split": "#00798c",
    "via Envoy": "#edae49",
    "direct": "#30638e",
    # bench baseline's sides
    "project": "#00798c",
    "gevent": "#d1495b",
    "asyncio": "#edae49",
}
_NINES = (0.5, 0.9, 0.99, 0.999, 0.9999)
_DPI = 120


def _color(name: str) -> str:
    return COLORS.get(name, "#555555")


def _nines_x(q: float) -> float:
    return -math.log10(1.0 - q)


@_needs_matplotlib
def latency_cdf(
    series_ms: Mapping[str, Sequence[float]],
    path: Path,
    *,
    title: str,
    floor_p99_ms: float | None = None,
    deadline_ms: float | None = None,
) -> Path:
    """Left: CDF on a log latency axis. Right: latency by percentile (tail up to p99.99)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for name, values in series_ms.items():
        xs = sorted(values)
        if not xs:
            continue
        n = len(xs)
        ys = [(i + 1) / n for i in range(n)]
        left.step(xs, ys, where="post", color=_color(name), label=f"{name} ({n} offers)", lw=1.8)
        qs = [q for q in (i / n for i in range(1, n)) if q <= 1 - 1 / n]
        if qs:
            right.plot(
                [_nines_x(q) for q in qs],
                [xs[min(n - 1, math.ceil(q * n) - 1)] for q in qs],
                color=_color(name),
                lw=1.8,
                label=name,
            )
    for ax in (left, right):
        if floor_p99_ms is not None:
            (ax.axvline if ax is left else ax.axhline)(
                floor_p99_ms,
                color="grey",
                ls="--",
                lw=1,
                label=f"upstream floor p99 {floor_p99_ms:.0f} ms",
            )
        if deadline_ms is not None:
            (ax.axvline if ax is left else ax.axhline)(
                deadline_ms, color="black", ls=":", lw=1.2, label=f"deadline {deadline_ms:.0f} ms"
            )
    left.set_xscale("log")
    everything = [x for v in series_ms.values() for x in v]
    low, high = (min(everything), max(everything)) if everything else (1.0, 10.0)
    _plain_log_ticks(left.xaxis, low, high)
    left.set_xlabel("offer latency, ms (log scale)")
    left.set_ylabel("fraction of offers at or below")
    left.set_ylim(0, 1.01)
    left.grid(True, which="both", alpha=0.3)
    left.legend(loc="lower right", fontsize=8)
    right.set_yscale("log")
    _plain_log_ticks(right.yaxis, low, high)
    right.set_xticks([_nines_x(q) for q in _NINES])
    right.set_xticklabels([f"p{q * 100:g}" for q in _NINES])
    right.set_xlabel("percentile")
    right.set_ylabel("offer latency, ms (log scale)")
    right.grid(True, which="both", alpha=0.3)
    right.legend(loc="upper left", fontsize=8)
    right.set_title("the tail", fontsize=10)
    fig.suptitle(
        f"{title}\nlatency from each request's scheduled send time (open loop); "
        "a failed request counts at the deadline or later",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


def _plain_log_ticks(axis: Any, low: float, high: float) -> None:
    """Ticks printed as plain milliseconds (not 10^2): 1-2-5 over a wide range,
    1-1.5-2-3-5-7 over a narrow one (where 1-2-5 leaves a single tick)."""
    narrow = high / max(low, 1e-9) < 20
    subs = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if narrow else (1.0, 2.0, 5.0)
    axis.set_major_locator(ticker.LogLocator(base=10, subs=subs))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


@_needs_matplotlib
def time_breakdown(breakdowns: Mapping[str, Mapping[str, Any]], path: Path, *, title: str) -> Path:
    """Per layout, stacked bars (median offer, slowest 1 %) of where the offer time went."""
    fig, ax = plt.subplots(figsize=(9, 6.0))
    labels: list[str] = []
    x = 0.0
    # One colour per part name, the same in every bar (tracing.readback.breakdown's parts in
    # order, then "unexplained" in grey; the no-tracing bars' two parts first).
    names: list[str] = []
    for bd in breakdowns.values():
        for parts in bd["bars"].values():
            names += [p for p in parts if p not in names]
    cmap = plt.get_cmap("tab20")
    colors = {
        name: ("#b0b0b0" if name == UNEXPLAINED else cmap(i % 20)) for i, name in enumerate(names)
    }
    legend_done: set[str] = set()
    for layout, bd in breakdowns.items():
        for bar_name, parts in bd["bars"].items():
            bottom, below = 0.0, 0.0
            for part, value in parts.items():
                # A negative mean part (two timestamps out of order, or overlapping
                # parts) cannot stack up: it goes below zero, hatched, so that the bar
                # does not overstate the band's time.
                negative = value < 0
                ax.bar(
                    x,
                    value,
                    bottom=below if negative else bottom,
                    color=colors[part],
                    edgecolor="white",
                    linewidth=0.5,
                    hatch="//" if negative else None,
                    label=part if part not in legend_done else None,
                )
                legend_done.add(part)
                if negative:
                    below += value
                else:
                    bottom += value
            total = bottom + below
            pct = (bd.get("unexplained_pct") or {}).get(bar_name)
            note = "" if pct is None else f"\n{pct:.1f} % unexpl."
            ax.text(x, bottom, f"{total:.0f} ms{note}", ha="center", va="bottom", fontsize=7)
            labels.append(f"{layout}\n{bar_name}")
            x += 1
        x += 0.5
    ticks = []
    x = 0.0
    for _layout, bd in breakdowns.items():
        for _ in bd["bars"]:
            ticks.append(x)
            x += 1
        x += 0.5
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("mean offer latency in the band, ms")
    low, high = ax.get_ylim()
    ax.set_ylim(min(0.0, low), high * 1.08)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


@_needs_matplotlib
def cpu_by_component(cpu_use: Mapping[str, Mapping[str, float]], path: Path, *, title: str) -> Path:
    """Per layout, a horizontal stacked bar of CPU % of one core by component."""
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.9 * len(cpu_use)))
    names: list[str] = []
    for use in cpu_use.values():
        names += [n for n in use if n not in names and n != OTHER]
    names.append(OTHER)  # the neighbours last, hatched
    cmap = plt.get_cmap("tab10")
    labelled: set[str] = set()
    for row, (_layout, use) in enumerate(cpu_use.items()):
        left = 0.0
        for i, name in enumerate(names):
            value = float(use.get(name, 0.0))
            if value < 0.5:  # invisible at this scale (the driver, ~0.05 %)
                continue
            other = name == OTHER
            ax.barh(
                row,
                value,
                left=left,
                color="#dddddd" if other else cmap(i % 10),
                hatch="//" if other else None,
                edgecolor="white",
                label=None if name in labelled else name,
            )
            labelled.add(name)
            if value >= 6:
                ax.text(left + value / 2, row, f"{value:.0f}", ha="center", va="center", fontsize=7)
            left += value
    cores = os.cpu_count() or 1
    ax.set_yticks(range(len(cpu_use)))
    ax.set_yticklabels(list(cpu_use))
    ax.invert_yaxis()  # the first layout on top
    ax.set_xlabel(f"CPU, % of one core (the machine has {cores} cores = {100 * cores} %)")
    ax.axvline(100 * cores, color="black", lw=1, ls=":")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=4)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


@_needs_matplotlib
def rate_steps(
    steps: Sequence[Mapping[str, Any]], path: Path, *, title: str, p99_limit_ms: float
) -> Path:
    """io capacity: p50/p99 and served rate per step rate. Steps run more than once (a
    retry after a failure) show every attempt; failed attempts are crosses."""
    fig, (lat, thr) = plt.subplots(1, 2, figsize=(11, 4.2))
    ordered = sorted(steps, key=lambda s: s["rate_rps"])
    rates = [s["rate_rps"] for s in ordered]
    best: dict[float, Mapping[str, Any]] = {}
    for s in ordered:  # per rate, the attempt the line goes through: a pass if any
        if s["rate_rps"] not in best or (s["passed"] and not best[s["rate_rps"]]["passed"]):
            best[s["rate_rps"]] = s
    xs = sorted(best)
    for key, color, label in (("p50_ms", "#30638e", "p50"), ("p99_ms", "#d1495b", "p99")):
        lat.plot(xs, [best[x][key] for x in xs], "-", color=color, label=label)
        for passed, marker in ((True, "o"), (False, "x")):
            pts = [s for s in ordered if s["passed"] is passed]
            lat.plot([s["rate_rps"] for s in pts], [s[key] for s in pts], marker, color=color)
    lat.axhline(p99_limit_ms, color="black", ls=":", label=f"p99 limit {p99_limit_ms:.0f} ms")
    lat.set_yscale("log")
    values = [s[k] for s in steps for k in ("p50_ms", "p99_ms")] + [p99_limit_ms]
    _plain_log_ticks(lat.yaxis, min(values), max(values))
    lat.set_xlabel("offered offers/s (x: an attempt that failed)")
    lat.set_ylabel("latency, ms (log)")
    lat.grid(True, which="both", alpha=0.3)
    lat.legend(fontsize=8)
    thr.plot(xs, [best[x]["rps"] for x in xs], "-", color="#00798c", label="served (200) /s")
    for passed, marker in ((True, "o"), (False, "x")):
        pts = [s for s in ordered if s["passed"] is passed]
        thr.plot([s["rate_rps"] for s in pts], [s["rps"] for s in pts], marker, color="#00798c")
    thr.plot(rates, rates, ls=":", color="grey", label="offered")
    thr.set_xlabel("offered offers/s")
    thr.set_ylabel("offers/s")
    thr.grid(True, alpha=0.3)
    thr.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


def soak_timeline(
    series: Mapping[str, Mapping[str, Any]],
    events: Sequence[tuple[float, str]],
    path: Path,
    *,
    title: str,
) -> Path:
    """The soak: RSS (MiB) and open descriptors of every process over time, one line per
    process (replaced workers start a new line), the kills and the apply as verticals."""
    fig, (mem, fds) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    labels = sorted({row["label"] for row in series.values()})
    palette = plt.get_cmap("tab10")
    color = {label: palette(i % 10) for i, label in enumerate(labels)}
    seen: set[str] = set()
    for row in series.values():
        label = row["label"]
        legend = label if label not in seen else None
        seen.add(label)
        t_min = [t / 60 for t in row["t"]]
        mem.plot(t_min, [r / 1024 for r in row["rss"]], color=color[label], lw=1, label=legend)
        fds.plot(t_min, row["fds"], color=color[label], lw=1)
    for at_s, what in events:
        shade = "black" if "apply" in what else "tab:blue" if "fitted" in what else "grey"
        for ax in (mem, fds):
            ax.axvline(at_s / 60, color=shade, ls=":", lw=0.8)
    mem.set_ylabel("RSS, MiB")
    fds.set_ylabel("open file descriptors")
    fds.set_xlabel(
        "minutes (dotted: a worker SIGKILLed; black: routes apply; blue: the long soak's "
        "growth fitted from here)"
    )
    for ax in (mem, fds):
        ax.grid(True, alpha=0.3)
    mem.legend(fontsize=7, ncol=2)
    mem.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


@_needs_matplotlib
def goodput(steps: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Overload: goodput (fraction of capacity) against offered load (multiple of
    capacity), one panel per pool, one line per tracing mode and admission."""
    pools = list(dict.fromkeys(s["pool"] for s in steps))
    fig, axes = plt.subplots(1, len(pools), figsize=(5.5 * len(pools), 4.2), squeeze=False)
    top_y = max([1.15] + [s["goodput_fraction"] * 1.08 for s in steps])
    for ax, pool in zip(axes[0], pools, strict=True):
        mine = [s for s in steps if s["pool"] == pool]
        arms = list(dict.fromkeys((s["mode"], s.get("admission", "")) for s in mine))
        for (mode, admission), color in zip(arms, _MODE_COLORS, strict=False):
            pts = sorted(
                (s for s in mine if (s["mode"], s.get("admission", "")) == (mode, admission)),
                key=lambda s: s["multiple"],
            )
            label = f"{mode}, {admission}" if admission else mode
            xs = [s["multiple"] for s in pts]
            ax.plot(xs, [s["goodput_fraction"] for s in pts], "o-", color=color, label=label)
        top = max(s["multiple"] for s in mine)
        ax.plot([0, 1, top], [0, 1, 1], ls=":", color="grey", label="offered, up to capacity")
        ax.axhline(0.9, color="black", ls="--", lw=0.8, label="target 90 %")
        ax.set_xlabel(f"offered load, x capacity ({mine[0]['capacity_rps']:g}/s)")
        ax.set_ylabel("goodput (200 in time), x capacity")
        ax.set_ylim(0, top_y)
        ax.set_title(f"{pool} pool", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, title="tracing, admission")
    fig.suptitle("Goodput past capacity: shed the excess, serve the rest", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


_MODE_COLORS = ("#30638e", "#d1495b", "#00798c", "#edae49", "#6a4c93", "#8ac926")


@_needs_matplotlib
def incident_timeline(
    points: Sequence[Mapping[str, float]],
    windows: Mapping[str, tuple[float, float]],
    path: Path,
    *,
    cap_ms: float,
    title: str,
) -> Path:
    """`pricingctl incident`: offers within the cap (as nines) and their p99 over the
    run, the before and after windows shaded and the move marked."""
    fig, (ok, p99) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    ts = [p["t_s"] for p in points]
    # Every offer within the cap shows at the top of the axis, not at infinity.
    top = 4.5
    ok.plot(ts, [min(_nines_x(p["within_cap"]), top) if p["within_cap"] < 1 else top
                 for p in points], "o-", ms=3, color=COLORS["split"])  # fmt: skip
    ok.set_ylim(0, top + 0.2)
    ok.set_yticks([1, 2, 3, 4])
    ok.set_yticklabels(["90 %", "99 %", "99.9 %", "99.99 %"])
    ok.set_ylabel("offers within the cap\n(top: every one)")
    p99.plot(ts, [p["p99_ms"] for p in points], "o-", ms=3, color=COLORS["shared"])
    p99.axhline(cap_ms, color="black", ls=":", lw=0.8, label=f"cap {cap_ms:.0f} ms")
    p99.set_yscale("log")
    _plain_log_ticks(p99.yaxis, min(p["p99_ms"] for p in points), max(p["p99_ms"] for p in points))
    p99.set_ylabel("offers p99, ms (log)")
    p99.set_xlabel("seconds since the load started")
    for name, (start, end) in windows.items():
        for ax in (ok, p99):
            if name == "move":
                ax.axvspan(start, end, color="#edae49", alpha=0.35, lw=0)
            else:
                ax.axvspan(start, end, color="grey", alpha=0.08, lw=0)
        ok.text((start + end) / 2, top + 0.05, name, ha="center", va="bottom", fontsize=8)
    for ax in (ok, p99):
        ax.grid(True, alpha=0.3)
    p99.legend(fontsize=8)
    ok.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


@_needs_matplotlib
def baseline_cpu(doc: Mapping[str, Any], path: Path) -> Path:
    """bench baseline: CPU per offer of each side, grouped by tracing mode and rate,
    with p99 over each bar; each side's capacity in the legend."""
    windows = doc["windows"]
    groups = list(dict.fromkeys((w["tracing"], w["rate_rps"]) for w in windows))
    sides = list(dict.fromkeys(w["side"] for w in windows))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / max(1, len(sides))
    for j, side in enumerate(sides):
        cap = doc.get("capacity", {}).get(side)
        label = side if cap is None else f"{side} (capacity {cap['capacity_rps']:g}/s)"
        for i, (mode, rate) in enumerate(groups):
            row = next(
                (
                    w
                    for w in windows
                    if (w["tracing"], w["rate_rps"], w["side"]) == (mode, rate, side)
                ),
                None,
            )
            if row is None or row["cpu_ms_per_offer"] is None:
                continue
            x = i + (j - (len(sides) - 1) / 2) * width
            ax.bar(x, row["cpu_ms_per_offer"], width, color=_color(side), label=label)
            label = None
            ax.text(
                x,
                row["cpu_ms_per_offer"],
                f"p99\n{row['p99_ms']:.0f}",
                ha="center",
                va="bottom",
                fontsize=6,
            )
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"tracing {m}\n{r:g} offers/s" for m, r in groups])
    ax.set_ylabel("worker CPU per offer, ms")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("One worker per stack, upstreams fixed; p99 (ms) over each bar", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


@_needs_matplotlib
def fault_matrix(
    rows: Sequence[tuple[str, Sequence[int]]],
    bin_s: float,
    window: tuple[float, float],
    path: Path,
) -> Path:
    """The fault matrix: failed requests per time bin, one row per fault, the fault's
    window between dotted lines."""
    width = max((len(bins) for _, bins in rows), default=1)
    grid = [list(bins) + [0] * (width - len(bins)) for _, bins in rows]
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.6))
    image = ax.imshow(
        grid or [[0]],
        aspect="auto",
        cmap="Reds",
        interpolation="nearest",
        extent=(0, width * bin_s, len(rows) - 0.5, -0.5),
        vmin=0,
    )
    ax.set_yticks(range(len(rows)), [name for name, _ in rows], fontsize=8)
    for x in window:
        ax.axvline(x, color="black", ls=":", lw=0.8)
    ax.set_xlabel("seconds of load (dotted: the fault's window; a kill is at its start)")
    fig.colorbar(image, ax=ax, label=f"failed requests per {bin_s:g} s")
    ax.set_title("faults: failed requests over time, one fault per row", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path
