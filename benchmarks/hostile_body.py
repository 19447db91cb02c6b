"""A 200 MB JSON body sent to a real party process without a credential (issue 14, F1).

Starts `python -m party_api`, announces a 200 MB body on a raw socket and keeps sending it while
watching for the answer; repeats on several routes, then once with a valid credential on a route
whose limit is smaller. The last stdout line is one JSON object: the median and worst time from the
end of the request headers to the complete answer, the statuses, how much of each body the server
let in, and the rise of the process's peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the raw-socket client lives with the tests

from cli.localfed import COORD_TOKEN, party_proc  # noqa: E402
from tests.support.hostile import peak_rss_bytes, send_unread_body  # noqa: E402

ROUTES = ["/v1/interactions", "/v1/items", "/v1/predictions", "/v1/federation/runs/r1/configure",
          "/v1/social/sessions"]


def main() -> None:
    """Run the hostile requests and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    size = args.size_mb << 20
    with tempfile.TemporaryDirectory() as tmp:
        proc = party_proc("hostile", Path(tmp)).start()
        try:
            assert proc.popen is not None
            before = peak_rss_bytes(proc.popen.pid)
            answers = [send_unread_body(proc.url, r, size=size) for _ in range(args.repeats) for r in ROUTES]
            small = send_unread_body(proc.url, "/v1/federation/runs/r1/publish", size=size,
                                     headers={"Authorization": f"Bearer {COORD_TOKEN}", "X-Fedrec-Protocol": "1"})
            rise = peak_rss_bytes(proc.popen.pid) - before
        finally:
            proc.stop()
    seconds = [a.seconds_to_answer for a in answers]
    print(json.dumps({
        "body_mb": args.size_mb, "requests": len(answers),
        "statuses": sorted({a.status for a in answers}),
        "median_ms_to_answer": round(1000 * statistics.median(seconds), 2),
        "max_ms_to_answer": round(1000 * max(seconds), 2),
        "max_body_bytes_let_in": max(a.bytes_sent for a in answers),
        "small_route_status": small.status, "small_route_ms": round(1000 * small.seconds_to_answer, 2),
        "peak_rss_rise_mb": round(rise / 2**20, 2),
    }))


if __name__ == "__main__":
    main()
