"""Route config -> Envoy config and per-pool settings.

`routing` is pure data and rendering: it loads `routes.toml` and validates it
(`load`, `model`), writes a derived one back (`write`), renders what is derived
from it (`envoy`, `gunicorn`; for containers `compose` and `kubernetes`, sizing
replicas in `sizing`), checks it against the endpoints an app hands in
(`check`) and names the pool process's environment (`env`). It imports no other
package of the project, opens no sockets and imports no Flask.
"""
