#!/usr/bin/env python3
"""An OCI runtime for podman on machines that deny setrlimit: it deletes the rlimits
from the bundle's config.json (a container's start) or from the process spec (an exec,
which health checks use too), then runs runc (or crun) with the same arguments.
Given to podman by tests/integration/support/podman.py only when a container cannot start
without it (`error setting rlimit ...: operation not permitted`).

Without the limits a container keeps the ones conmon has (the machine's own), which is
what every other process here runs with.
"""

import json
import os
import shutil
import sys


def option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def drop_rlimits(path: str, process_key: bool) -> None:
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    process = spec.get("process", {}) if process_key else spec
    if process.pop("rlimits", None) is not None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f)


def main() -> None:
    args = sys.argv[1:]
    # `create`/`run`: the bundle's config.json; `exec` (podman exec, health checks): the
    # process spec given on its own.
    bundle = option(args, "--bundle") or option(args, "-b")
    if bundle is not None:
        drop_rlimits(os.path.join(bundle, "config.json"), process_key=True)
    process = option(args, "--process")
    if process is not None:
        drop_rlimits(process, process_key=False)
    runtime = shutil.which("runc") or shutil.which("crun")
    if runtime is None:
        sys.exit("oci-runtime-no-rlimits: neither runc nor crun is installed")
    os.execv(runtime, [runtime, *args])


if __name__ == "__main__":
    main()
