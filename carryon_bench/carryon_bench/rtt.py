"""Service round trips against a running graph, printed as JSON (run as a child process
by `carryon bench graph`, so the benchmark process itself never joins the DDS domain).

    python -m carryon_bench.rtt --namespace carryon --calls 100
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from carryon_bringup.node import GraphClient
from carryon_common.core import names
from carryon_interfaces.srv import GetContext, GetStatus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--namespace", default=names.DEFAULT_NAMESPACE)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args(argv)
    status_ms: list[float] = []
    context_ms: list[float] = []
    with GraphClient(args.namespace, timeout_s=10.0) as client:
        status = names.status_service(args.namespace, names.MEMORY_NODE)
        context = names.qualify(args.namespace, names.MEMORY_GET_CONTEXT)
        for samples, srv, service, request in (
            (status_ms, GetStatus, status, GetStatus.Request()),
            (context_ms, GetContext, context, GetContext.Request()),
        ):
            client.session.call(srv, service, request, timeout_s=10.0)  # warm-up: discovery + matching
            for _ in range(args.calls):
                started = time.perf_counter()
                client.session.call(srv, service, request, timeout_s=5.0)
                samples.append((time.perf_counter() - started) * 1e3)
    json.dump({"status_ms": status_ms, "context_ms": context_ms}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
