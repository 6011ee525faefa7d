"""The HTTP layer: the URL rules one pool registers (`urls`), admission at the handler
(`admission`), the views and what an offer asks its upstreams (`views`, `offers`),
request parsing and shapes (`validation`, `schemas`), `/openapi.json` (`openapi`), and
errors mapped to problem+json responses (`problems`)."""
