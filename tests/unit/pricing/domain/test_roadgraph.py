"""Road graphs: deterministic builds, O(1) snapping and Dijkstra's paths.

Hand-built lattices pin exact numbers; the real city graphs get property checks.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pricing.domain import roadgraph
from pricing.domain.errors import NoRoute as NoRouteError
from pricing.domain.geo import BoundingBox, LatLng, haversine_m
from pricing.domain.regions import REGIONS, Region
from pricing.domain.roadgraph import (
    PathResult,
    RoadGraph,
    build_road_graph,
    graph_for,
)

SF = REGIONS["sf"]
NYC = REGIONS["nyc"]
# A 0.01 x 0.01 degree square: each lattice point sits on a corner.
TINY_BBOX = BoundingBox(south=37.70, west=-122.50, north=37.71, east=-122.49)


def _points(region: Region) -> st.SearchStrategy[LatLng]:
    b = region.bbox
    return st.builds(
        LatLng,
        st.floats(b.south, b.north, allow_nan=False),
        st.floats(b.west, b.east, allow_nan=False),
    )


def _lattice_2x2(adj: list[list[roadgraph.Edge]]) -> RoadGraph:
    """Nodes 0 (SW), 1 (SE), 2 (NW), 3 (NE) exactly on the bbox corners."""
    b = TINY_BBOX
    return RoadGraph.from_parts(
        b, 2, 2, [b.south, b.south, b.north, b.north], [b.west, b.east, b.west, b.east], adj
    )


@pytest.fixture(scope="module")
def two_way_sf() -> RoadGraph:
    return build_road_graph(SF, one_way=False)


def test_picks_the_fastest_path_not_the_shortest() -> None:
    # 0 -> 3 direct is short but slow; 0 -> 1 -> 3 is longer but on a fast road.
    graph = _lattice_2x2(
        [
            [(3, 1_000.0, 200.0), (1, 800.0, 40.0)],
            [(3, 700.0, 35.0), (0, 800.0, 40.0)],
            [(0, 500.0, 50.0)],
            [(2, 600.0, 60.0), (1, 700.0, 35.0), (0, 1_000.0, 200.0)],
        ]
    )
    assert graph.shortest_path(0, 3) == PathResult(distance_m=1_500.0, duration_s=75.0, nodes=3)
    assert graph.shortest_path(3, 2) == PathResult(distance_m=600.0, duration_s=60.0, nodes=2)


def test_same_node_is_a_zero_trip() -> None:
    graph = build_road_graph(SF)
    node = graph.nearest_node(SF.center())
    assert graph.shortest_path(node, node) == PathResult(0.0, 0.0, 1)


def test_unreachable_destination_raises_no_route() -> None:
    # Node 2 can only be left, never reached: it is not routable, but can still be asked for.
    graph = _lattice_2x2(
        [
            [(1, 100.0, 10.0)],
            [(0, 100.0, 10.0), (3, 100.0, 10.0)],
            [(0, 100.0, 10.0)],
            [(1, 100.0, 10.0)],
        ]
    )
    assert list(graph.routable) == [1, 1, 0, 1]
    with pytest.raises(NoRouteError):
        graph.shortest_path(0, 2)
    assert graph.shortest_path(2, 3) == PathResult(300.0, 30.0, 4)


def test_nearest_node_skips_unroutable_nodes() -> None:
    graph = _lattice_2x2(
        [
            [(1, 100.0, 10.0)],
            [(0, 100.0, 10.0), (3, 100.0, 10.0)],
            [(0, 100.0, 10.0)],
            [(1, 100.0, 10.0)],
        ]
    )
    near_nw_corner = LatLng(37.7099, -122.4999)
    assert graph.nearest_node(near_nw_corner) in {0, 3}
    assert graph.nearest_node(LatLng(37.7001, -122.4999)) == 0
    assert graph.nearest_node(LatLng(37.7099, -122.4901)) == 3


def test_from_parts_rejects_inconsistent_lattices() -> None:
    with pytest.raises(ValueError, match="expected 4 nodes"):
        RoadGraph.from_parts(TINY_BBOX, 2, 2, [37.7] * 3, [-122.5] * 3, [[], [], []])
    with pytest.raises(ValueError, match="outside"):
        _lattice_2x2([[(7, 1.0, 1.0)], [], [], []])


@pytest.mark.parametrize("region", [SF, NYC], ids=lambda r: r.name)
def test_build_is_deterministic_and_cached(region: Region) -> None:
    first, second = build_road_graph(region), build_road_graph(region)
    assert first == second
    assert graph_for(region) is graph_for(region)
    assert graph_for(region) == first


@pytest.mark.parametrize("region", [SF, NYC], ids=lambda r: r.name)
def test_city_graph_shape(region: Region) -> None:
    graph = graph_for(region)
    assert 20_000 <= graph.node_count <= 50_000
    assert graph.edge_count > 3 * graph.node_count
    # Parks and cut-off corners only take a sliver.
    assert sum(graph.routable) > 0.98 * graph.node_count
    b = region.bbox
    assert all(b.south <= lat <= b.north for lat in graph.node_lat)
    assert all(b.west <= lng <= b.east for lng in graph.node_lng)


def test_edges_are_never_shorter_than_the_straight_line() -> None:
    graph = graph_for(SF)
    for u in range(0, graph.node_count, 97):
        for v, length_m, travel_s in graph.edges(u):
            assert length_m >= haversine_m(graph.position(u), graph.position(v)) * (1 - 1e-9)
            assert travel_s > 0


@settings(max_examples=300, deadline=None)
@given(point=_points(SF))
def test_nearest_node_matches_a_full_scan(point: LatLng) -> None:
    graph = graph_for(SF)
    node = graph.nearest_node(point)
    assert graph.routable[node]
    # Away from parks the 3x3 lattice window always holds the true nearest node.
    b = SF.bbox
    r = round((point.lat - b.south) / (b.north - b.south) * (graph.rows - 1))
    c = round((point.lng - b.west) / (b.east - b.west) * (graph.cols - 1))
    window = [
        rr * graph.cols + cc
        for rr in range(max(0, r - 3), min(graph.rows, r + 4))
        for cc in range(max(0, c - 3), min(graph.cols, c + 4))
    ]
    assume(all(graph.routable[u] for u in window))
    best = min(haversine_m(point, graph.position(u)) for u in window)
    assert haversine_m(point, graph.position(node)) <= best + 1e-3


@pytest.mark.parametrize("region", [SF, NYC], ids=lambda r: r.name)
def test_points_outside_the_bbox_clamp_onto_it(region: Region) -> None:
    graph = graph_for(region)
    b = region.bbox
    far_north_east = LatLng(b.north + 1.0, b.east + 1.0)
    node = graph.nearest_node(far_north_east)
    assert graph.routable[node]
    assert node // graph.cols >= graph.rows - 2 and node % graph.cols >= graph.cols - 2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_points(SF), b=_points(SF))
def test_paths_are_at_least_the_straight_line(a: LatLng, b: LatLng) -> None:
    graph = graph_for(SF)
    src, dst = graph.nearest_node(a), graph.nearest_node(b)
    path = graph.shortest_path(src, dst)
    straight_m = haversine_m(graph.position(src), graph.position(dst))
    assert path.distance_m >= straight_m * 0.95
    # Nothing drives faster than the highways.
    assert path.duration_s >= path.distance_m / 26.8 - 1e-6
    assert (path.nodes == 1) == (src == dst)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_points(SF), b=_points(SF))
def test_two_way_streets_make_paths_symmetric(two_way_sf: RoadGraph, a: LatLng, b: LatLng) -> None:
    src, dst = two_way_sf.nearest_node(a), two_way_sf.nearest_node(b)
    there, back = two_way_sf.shortest_path(src, dst), two_way_sf.shortest_path(dst, src)
    assert there.duration_s == pytest.approx(back.duration_s, rel=1e-9)


@pytest.mark.parametrize("region", [SF, NYC], ids=lambda r: r.name)
def test_one_way_streets_keep_paths_roughly_symmetric(region: Region) -> None:
    graph = graph_for(region)
    b = region.bbox
    a = graph.nearest_node(
        LatLng(b.south + 0.2 * (b.north - b.south), b.west + 0.3 * (b.east - b.west))
    )
    z = graph.nearest_node(
        LatLng(b.south + 0.8 * (b.north - b.south), b.west + 0.7 * (b.east - b.west))
    )
    there, back = graph.shortest_path(a, z), graph.shortest_path(z, a)
    assert there.duration_s > 0
    assert 1 / 1.25 <= there.duration_s / back.duration_s <= 1.25


def test_cross_town_trip_is_plausible() -> None:
    graph = graph_for(SF)
    b = SF.bbox
    a, z = LatLng(b.south + 0.01, b.west + 0.01), LatLng(b.north - 0.01, b.east - 0.01)
    path = graph.shortest_path(graph.nearest_node(a), graph.nearest_node(z))
    straight_m = haversine_m(a, z)
    assert straight_m * 0.95 <= path.distance_m <= straight_m * 1.6
    mean_speed_mps = path.distance_m / path.duration_s
    assert 8 < mean_speed_mps < 26.8
    assert path.nodes > 50
    assert math.isfinite(path.duration_s)
