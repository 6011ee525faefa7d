"""The upstream client: the project's HTTP/1.1 response reader (`http1`), its keep-alive
client (`httpclient`) and the gateway that calls the upstream services with bulkheads
and one deadline (`gateway`). No Flask: it takes its observer and metrics as arguments."""
