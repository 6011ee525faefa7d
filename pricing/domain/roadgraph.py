"""Synthetic city road graphs, one per region, and fastest paths over them.

Each graph is seeded by its region's name, so every worker process builds the same city.
"""

from __future__ import annotations

import heapq
import math
import random
import threading
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from pricing.domain.errors import NoRoute
from pricing.domain.geo import EARTH_RADIUS_M, BoundingBox, LatLng, haversine_m
from pricing.domain.regions import Region

# The node count sets the CPU cost of a quote: Dijkstra settles every node closer (in time)
# than the destination, so a cross-town trip settles about half the city. The CPU endpoint
# is meant to spend ~20-40 ms per quote; re-measure after changing this.
_TARGET_NODES = 30_000
_MIN_LINES = 8
# Below half a block, rows and columns never cross, which the O(1) nearest-node lookup
# relies on: it only looks one lattice cell around its guess.
_JITTER_FRACTION = 0.3

_LOCAL_SPEED_MPS = 11.2  # ~25 mph
_ARTERIAL_SPEED_MPS = 15.6  # ~35 mph
_HIGHWAY_SPEED_MPS = 26.8  # ~60 mph
_ARTERIAL_EVERY_LINES = 8
_HIGHWAY_ROWS = 2
_HIGHWAY_COLS = 1
# Local streets wind and carry stop signs. Both only ever lengthen or slow an edge, which
# keeps every road distance at or above the straight-line distance between its ends.
_LOCAL_DETOUR_MAX = 0.08
_LOCAL_SLOWDOWN_MAX = 0.25
_REMOVED_LOCAL_EDGE_FRACTION = 0.06
_ONE_WAY_LINE_FRACTION = 0.3
_PARK_COUNT = 2
_PARK_RADIUS_LINES = (2, 4)

Edge = tuple[int, float, float]
"""(to_node, length_m, travel_s)."""


@dataclass(frozen=True, slots=True)
class PathResult:
    distance_m: float
    duration_s: float
    nodes: int
    """Intersections on the path, both ends included (1 when source == destination)."""


@dataclass(frozen=True, slots=True)
class RoadGraph:
    """A street network laid out on a rows x cols lattice over `bbox`. Treat it as read-only.

    Node `r * cols + c` sits near lattice point (r, c), which is what makes the nearest-node
    lookup O(1). Edges are stored CSR-style in flat arrays (a tuple per edge would take ~5x
    the memory, in every worker): the edges leaving u are indices first[u]..first[u+1]-1 of
    `to`, `length_m` and `travel_s`. `routable` marks the largest strongly connected
    component; only its nodes come out of `nearest_node`, so any two of them are mutually
    reachable. `snap[u]` is the routable node fewest lattice steps from lattice point u.
    """

    bbox: BoundingBox
    rows: int
    cols: int
    node_lat: array[float]
    node_lng: array[float]
    first: array[int]
    to: array[int]
    length_m: array[float]
    travel_s: array[float]
    routable: bytes
    snap: array[int]

    @classmethod
    def from_parts(
        cls,
        bbox: BoundingBox,
        rows: int,
        cols: int,
        node_lat: Sequence[float],
        node_lng: Sequence[float],
        adj: Sequence[Sequence[Edge]],
    ) -> RoadGraph:
        """Assemble a graph from lattice positions and per-node edge lists."""
        n = rows * cols
        if not (len(node_lat) == len(node_lng) == len(adj) == n):
            raise ValueError(f"expected {n} nodes for a {rows}x{cols} lattice")
        first = array("l", [0])
        to = array("l")
        length_m = array("d")
        travel_s = array("d")
        for edges in adj:
            for v, length, travel in edges:
                if not 0 <= v < n:
                    raise ValueError(f"edge to node {v} outside 0..{n - 1}")
                to.append(v)
                length_m.append(length)
                travel_s.append(travel)
            first.append(len(to))
        routable = _main_component(first, to)
        return cls(
            bbox,
            rows,
            cols,
            array("d", node_lat),
            array("d", node_lng),
            first,
            to,
            length_m,
            travel_s,
            routable,
            _snap_table(routable, rows, cols),
        )

    @property
    def node_count(self) -> int:
        return self.rows * self.cols

    @property
    def edge_count(self) -> int:
        """Directed edges: a two-way street counts twice."""
        return len(self.to)

    def edges(self, node: int) -> list[Edge]:
        return [
            (self.to[i], self.length_m[i], self.travel_s[i])
            for i in range(self.first[node], self.first[node + 1])
        ]

    def position(self, node: int) -> LatLng:
        return LatLng(self.node_lat[node], self.node_lng[node])

    def nearest_node(self, point: LatLng) -> int:
        """The routable intersection nearest `point`; points outside the bbox clamp onto it."""
        b, rows, cols = self.bbox, self.rows, self.cols
        fr = (point.lat - b.south) / (b.north - b.south) * (rows - 1)
        fc = (point.lng - b.west) / (b.east - b.west) * (cols - 1)
        r0 = min(rows - 1, max(0, round(fr)))
        c0 = min(cols - 1, max(0, round(fc)))
        lng_scale = math.cos(math.radians(point.lat))
        best, best_d2 = -1, math.inf
        for r in range(max(0, r0 - 1), min(rows, r0 + 2)):
            for c in range(max(0, c0 - 1), min(cols, c0 + 2)):
                u = r * cols + c
                if not self.routable[u]:
                    continue
                dy = self.node_lat[u] - point.lat
                dx = (self.node_lng[u] - point.lng) * lng_scale
                d2 = dx * dx + dy * dy
                if d2 < best_d2:
                    best, best_d2 = u, d2
        # Only inside a park (or another hole) is no routable node one cell away.
        return best if best >= 0 else self.snap[r0 * cols + c0]

    def shortest_path(self, src: int, dst: int) -> PathResult:
        """The fastest path by travel time (Dijkstra); NoRoute if dst is unreachable."""
        n = self.node_count
        if not (0 <= src < n and 0 <= dst < n):
            raise IndexError(f"nodes must be in 0..{n - 1}, got {src} and {dst}")
        if src == dst:
            return PathResult(0.0, 0.0, 1)
        first, to, length_m, travel_s = self.first, self.to, self.length_m, self.travel_s
        time_s = [math.inf] * n
        dist_m = [0.0] * n
        hops = [0] * n
        time_s[src] = 0.0
        heap: list[tuple[float, int]] = [(0.0, src)]
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            t, u = pop(heap)
            if t > time_s[u]:
                continue  # stale entry: u was settled earlier through a faster path
            if u == dst:
                return PathResult(dist_m[u], t, hops[u] + 1)
            du, hu = dist_m[u], hops[u] + 1
            for i in range(first[u], first[u + 1]):
                v = to[i]
                nt = t + travel_s[i]
                if nt < time_s[v]:
                    time_s[v] = nt
                    dist_m[v] = du + length_m[i]
                    hops[v] = hu
                    push(heap, (nt, v))
        raise NoRoute(f"no route from node {src} to node {dst}")


def build_road_graph(region: Region, *, one_way: bool = True) -> RoadGraph:
    """Build the region's street network: the same region always gives the same graph.

    A jittered grid of local streets with some blocks missing, a few parks without streets,
    faster arterials every few lines, a few highways and, unless `one_way` is False (tests
    use that to check symmetry), some one-way lines.
    """
    # One random stream, drawn from in this order (nodes, fast lines, parks, one-way
    # lines, streets): a change of order would change every region's graph.
    rng = random.Random(f"roadgraph:{region.name}")
    b = region.bbox
    rows, cols = _grid_size(b)
    node_lat, node_lng = _jittered_nodes(rng, b, rows, cols)
    lines = _fast_lines(rng, rows, cols)
    in_park = _parks(rng, rows, cols)
    one_way_dir = _one_way_lines(rng, rows, cols, lines) if one_way else {}
    adj = _streets(rng, rows, cols, (node_lat, node_lng), lines, in_park, one_way_dir)
    return RoadGraph.from_parts(b, rows, cols, node_lat, node_lng, adj)


@dataclass(frozen=True)
class _FastLines:
    """The grid lines (row or column numbers) that are arterials or highways."""

    arterial_rows: set[int]
    arterial_cols: set[int]
    highway_rows: set[int]
    highway_cols: set[int]


def _grid_size(b: BoundingBox) -> tuple[int, int]:
    """Rows and columns of the grid: about _TARGET_NODES nodes over the bbox."""
    height_m = haversine_m(LatLng(b.south, b.west), LatLng(b.north, b.west))
    mid_lat = (b.south + b.north) / 2
    width_m = haversine_m(LatLng(mid_lat, b.west), LatLng(mid_lat, b.east))
    block_m = math.sqrt(height_m * width_m / _TARGET_NODES)
    rows = max(_MIN_LINES, round(height_m / block_m) + 1)
    cols = max(_MIN_LINES, round(width_m / block_m) + 1)
    return rows, cols


def _jittered_nodes(
    rng: random.Random, b: BoundingBox, rows: int, cols: int
) -> tuple[list[float], list[float]]:
    """Each node's latitude and longitude, row by row. Border nodes stay on the border,
    so every node is inside the bbox."""
    lat_step = (b.north - b.south) / (rows - 1)
    lng_step = (b.east - b.west) / (cols - 1)
    node_lat: list[float] = []
    node_lng: list[float] = []
    for r in range(rows):
        for c in range(cols):
            jr = rng.uniform(-_JITTER_FRACTION, _JITTER_FRACTION) if 0 < r < rows - 1 else 0.0
            jc = rng.uniform(-_JITTER_FRACTION, _JITTER_FRACTION) if 0 < c < cols - 1 else 0.0
            node_lat.append(b.south + (r + jr) * lat_step)
            node_lng.append(b.west + (c + jc) * lng_step)
    return node_lat, node_lng


def _fast_lines(rng: random.Random, rows: int, cols: int) -> _FastLines:
    return _FastLines(
        arterial_rows=set(range(rng.randrange(_ARTERIAL_EVERY_LINES), rows, _ARTERIAL_EVERY_LINES)),
        arterial_cols=set(range(rng.randrange(_ARTERIAL_EVERY_LINES), cols, _ARTERIAL_EVERY_LINES)),
        highway_rows=set(rng.sample(range(2, rows - 2), _HIGHWAY_ROWS)),
        highway_cols=set(rng.sample(range(2, cols - 2), _HIGHWAY_COLS)),
    )


def _parks(rng: random.Random, rows: int, cols: int) -> list[bool]:
    """Whether each node (row by row) lies in a park: round ones, with no streets."""
    parks = []
    for _ in range(_PARK_COUNT):
        radius = rng.randint(*_PARK_RADIUS_LINES)
        centre = (rng.randrange(radius, rows - radius), rng.randrange(radius, cols - radius))
        parks.append((centre, radius))
    return [
        any((r - pr) ** 2 + (c - pc) ** 2 <= radius**2 for (pr, pc), radius in parks)
        for r in range(rows)
        for c in range(cols)
    ]


def _one_way_lines(
    rng: random.Random, rows: int, cols: int, lines: _FastLines
) -> dict[tuple[str, int], int]:
    """(axis, line) -> its direction (+1 or -1). A one-way line runs the same way along
    its whole length, alternating like Manhattan's; fast lines are two-way."""
    one_way_dir: dict[tuple[str, int], int] = {}
    for axis, count, fast in (
        ("row", rows, lines.arterial_rows | lines.highway_rows),
        ("col", cols, lines.arterial_cols | lines.highway_cols),
    ):
        for line in range(count):
            if line not in fast and rng.random() < _ONE_WAY_LINE_FRACTION:
                one_way_dir[axis, line] = 1 if line % 2 else -1
    return one_way_dir


def _streets(
    rng: random.Random,
    rows: int,
    cols: int,
    nodes: tuple[list[float], list[float]],
    lines: _FastLines,
    in_park: list[bool],
    one_way_dir: dict[tuple[str, int], int],
) -> list[list[Edge]]:
    """Each node's outgoing edges: every grid step along a highway or an arterial; a
    local street unless it crosses a park or is one of the blocks left out."""
    node_lat, node_lng = nodes
    adj: list[list[Edge]] = [[] for _ in range(rows * cols)]
    # Over one block, equirectangular is within a micrometre of haversine, and calling
    # haversine here would be most of the build time.
    m_per_deg = math.radians(EARTH_RADIUS_M)

    def connect(u: int, v: int, speed_mps: float | None, direction: int) -> None:
        lng_scale = math.cos(math.radians((node_lat[u] + node_lat[v]) / 2))
        length_m = m_per_deg * math.hypot(
            node_lat[v] - node_lat[u], (node_lng[v] - node_lng[u]) * lng_scale
        )
        if speed_mps is None:
            length_m *= 1.0 + rng.uniform(0.0, _LOCAL_DETOUR_MAX)
            speed_mps = _LOCAL_SPEED_MPS * (1.0 - rng.uniform(0.0, _LOCAL_SLOWDOWN_MAX))
        travel_s = length_m / speed_mps
        if direction >= 0:
            adj[u].append((v, length_m, travel_s))
        if direction <= 0:
            adj[v].append((u, length_m, travel_s))

    # Always walked in this order: the rng stream, and so the graph, must not change.
    for r in range(rows):
        for c in range(cols):
            u = r * cols + c
            for axis, line, v, highways, arterials in (
                ("row", r, u + 1 if c + 1 < cols else -1, lines.highway_rows, lines.arterial_rows),
                (
                    "col",
                    c,
                    u + cols if r + 1 < rows else -1,
                    lines.highway_cols,
                    lines.arterial_cols,
                ),
            ):
                if v < 0:
                    continue
                if line in highways:
                    connect(u, v, _HIGHWAY_SPEED_MPS, 0)
                elif line in arterials:
                    connect(u, v, _ARTERIAL_SPEED_MPS, 0)
                elif in_park[u] or in_park[v] or rng.random() < _REMOVED_LOCAL_EDGE_FRACTION:
                    continue
                else:
                    connect(u, v, None, one_way_dir.get((axis, line), 0))
    return adj


_graphs: dict[Region, RoadGraph] = {}
_graphs_lock = threading.Lock()


def graph_for(region: Region) -> RoadGraph:
    """The region's road graph, built on first use and then shared by the whole process."""
    graph = _graphs.get(region)
    if graph is None:
        with _graphs_lock:
            graph = _graphs.get(region)
            if graph is None:
                graph = _graphs[region] = build_road_graph(region)
    return graph


def _main_component(first: array[int], to: array[int]) -> bytes:
    """Membership mask of the largest strongly connected component (Kosaraju)."""
    n = len(first) - 1
    # Iterative depth-first search: recursion would overflow on a city-sized graph.
    finished: list[int] = []
    seen = bytearray(n)
    for root in range(n):
        if seen[root]:
            continue
        seen[root] = 1
        stack = [(root, first[root])]
        while stack:
            u, i = stack[-1]
            if i < first[u + 1]:
                stack[-1] = (u, i + 1)
                v = to[i]
                if not seen[v]:
                    seen[v] = 1
                    stack.append((v, first[v]))
            else:
                stack.pop()
                finished.append(u)
    incoming: list[list[int]] = [[] for _ in range(n)]
    for u in range(n):
        for i in range(first[u], first[u + 1]):
            incoming[to[i]].append(u)
    component = [-1] * n
    sizes: list[int] = []
    for root in reversed(finished):
        if component[root] >= 0:
            continue
        label = len(sizes)
        component[root] = label
        todo = [root]
        size = 0
        while todo:
            u = todo.pop()
            size += 1
            for v in incoming[u]:
                if component[v] < 0:
                    component[v] = label
                    todo.append(v)
        sizes.append(size)
    largest = max(range(len(sizes)), key=sizes.__getitem__)
    return bytes(label == largest for label in component)


def _snap_table(routable: bytes, rows: int, cols: int) -> array[int]:
    """For each lattice point, the routable node fewest lattice steps away (itself if routable)."""
    snap = array("l", range(rows * cols))
    for start in (u for u, ok in enumerate(routable) if not ok):
        seen = {start}
        queue = deque([start])
        while queue:
            u = queue.popleft()
            if routable[u]:
                snap[start] = u
                break
            r, c = divmod(u, cols)
            for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
                v = nr * cols + nc
                if 0 <= nr < rows and 0 <= nc < cols and v not in seen:
                    seen.add(v)
                    queue.append(v)
    return snap
