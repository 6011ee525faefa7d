"""The pricing domain: regions, coordinates, road graphs, surge and fares, a request's
time budget (`deadline`) and the domain errors (`errors`). Pure values and computations:
no Flask, no sockets, no tracing."""
