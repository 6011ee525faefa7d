#!/usr/bin/env python3
"""An OCI runtime for podman on machines that deny setrlimit: it deletes
`process.rlimits` from the bundle's config.json, then runs runc (or crun) with the
same arguments. Given to podman by tests/integration/podman.py only when a container
cannot start without it (`error setting rlimit ...: operation not permitted`).

Without the limits a container keeps the ones conmon has (the machine's own), which is
what every other process here runs with.
"""

import json
import os
import shutil
import sys


def bundle(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg in ("--bundle", "-b") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--bundle="):
            return arg.split("=", 1)[1]
    return None


def main() -> None:
    args = sys.argv[1:]
    folder = bundle(args)
    if folder is not None:
        path = os.path.join(folder, "config.json")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        if config.get("process", {}).pop("rlimits", None) is not None:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(config, f)
    runtime = shutil.which("runc") or shutil.which("crun")
    if runtime is None:
        sys.exit("oci-runtime-no-rlimits: neither runc nor crun is installed")
    os.execv(runtime, [runtime, *args])


if __name__ == "__main__":
    main()
