"""`make fuzz`: bounded schemathesis runs against a live party and a live coordinator, with and without
credentials. Checks: no server error (5xx) and every answer conforms to the OpenAPI document.

Starts `python -m party_api` (a little data loaded) and `python -m coordinator_api` (the party
registered), then runs `st run` once per (service, credential) profile under a time budget each.
The failed-authentication throttle is raised for the run (the no-credential profiles would otherwise
be answered 429 after 100 requests, which is the throttle working, not a finding). The last line
printed is one JSON object: per profile the exit code, operations, test cases and failures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cli.localfed import ADMIN, API_KEY, COORD_TOKEN, coordinator_proc, party_proc  # noqa: E402
from services.protocol import PROTOCOL_VERSION  # noqa: E402

CHECKS = "not_a_server_error,response_schema_conformance"
NO_THROTTLE = "1000000000"


def profiles(party: str, coord: str) -> dict[str, tuple[str, list[str]]]:
    """(base URL, headers) of each fuzzing profile."""
    return {
        "party-none": (party, []),
        "party-admin+key": (party, [f"Authorization: Bearer {ADMIN}", f"X-API-Key: {API_KEY}"]),
        "party-coordinator": (party, [f"Authorization: Bearer {COORD_TOKEN}", f"X-Fedrec-Protocol: {PROTOCOL_VERSION}"]),
        "coordinator-none": (coord, []),
        "coordinator-key": (coord, [f"X-API-Key: {API_KEY}"]),
        # Last: the admin profile re-points and removes registered parties, after which the fan-out
        # rightly answers 502 (no party reachable); that is the documented answer, not a finding.
        "coordinator-admin": (coord, [f"Authorization: Bearer {ADMIN}"]),
    }


def _seed(party: str, coord: str) -> None:
    auth = {"Authorization": f"Bearer {ADMIN}"}
    rows = [{"user_id": f"u{k}", "item_id": f"i{k % 7}", "rating": 1 + k % 5} for k in range(40)]
    httpx.post(f"{party}/v1/interactions", headers=auth, json={"rows": rows}).raise_for_status()
    httpx.post(f"{coord}/v1/parties", headers=auth,
               json={"party_id": "p1", "url": party, "token": COORD_TOKEN}).raise_for_status()


def _run(name: str, base: str, headers: list[str], *, max_examples: int, max_time: int, out: Path) -> dict[str, object]:
    args = [str(Path(sys.executable).with_name("st")), "run", f"{base}/openapi.json", "--checks", CHECKS,
            "-n", str(max_examples), "--max-time", str(max_time), "--seed", "14", "--no-shrink",
            "--request-timeout", "30", "--workers", "1"]
    for header in headers:
        args += ["-H", header]
    started = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"},
                          timeout=max_time + 120)
    (out / f"{name}.log").write_text(done.stdout + done.stderr)
    text = done.stdout
    found = re.findall(r"(\d+) (?:failures?|errors?)", text.split("SUMMARY")[-1]) if "SUMMARY" in text else []
    cases = re.search(r"(\d+) generated", text) or re.search(r"Test cases:\s*\n?\s*(\d+)", text)
    return {"profile": name, "exit_code": done.returncode, "seconds": round(time.monotonic() - started, 1),
            "test_cases": int(cases.group(1)) if cases else None,
            "failures": sum(int(x) for x in found), "log": str(out / f"{name}.log")}


def main() -> None:
    """Start the services, fuzz every profile, print the summary."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-examples", type=int, default=25)
    parser.add_argument("--max-time", type=int, default=70, help="seconds per profile")
    parser.add_argument("--out", type=Path, default=Path("var/fuzz"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        party = party_proc("p1", Path(tmp), extra_env={"PARTY_AUTH_FAILURE_LIMIT": NO_THROTTLE}).start()
        coord = coordinator_proc(Path(tmp), extra_env={"COORD_AUTH_FAILURE_LIMIT": NO_THROTTLE}).start()
        try:
            _seed(party.url, coord.url)
            results = [_run(name, base, headers, max_examples=args.max_examples, max_time=args.max_time,
                            out=args.out) for name, (base, headers) in profiles(party.url, coord.url).items()]
        finally:
            party.stop()
            coord.stop()
    for r in results:
        print(f"{r['profile']}: exit {r['exit_code']}, {r['test_cases']} cases, {r['failures']} failures "
              f"({r['seconds']} s, log {r['log']})")
    print(json.dumps({"profiles": results, "failures": sum(int(r["failures"] or 0) for r in results),
                      "ok": all(r["exit_code"] == 0 for r in results)}))
    sys.exit(0 if all(r["exit_code"] == 0 for r in results) else 1)


if __name__ == "__main__":
    main()
