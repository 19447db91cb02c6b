"""Smoke test of benchmarks/sandwich.py on tiny shapes (skipped without the FilmTrust files)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.layout import DATA, ROOT

FILMTRUST = DATA / "filmtrust"


@pytest.mark.skipif(not (FILMTRUST / "trust.txt").exists(), reason="FilmTrust data not available")
def test_sandwich_benchmark_prints_json_last_line():
    cmd = [sys.executable, str(ROOT / "benchmarks" / "sandwich.py"), "--data", str(FILMTRUST),
           "--batch", "12", "--dim", "4", "--key-bits", "512", "--repeats", "1",
           "--unit-reps", "20", "--phe-entries", "2"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    for key in ("seconds_fast", "seconds_phe", "speedup", "seconds_lower_bound",
                "ratio_to_bound", "bytes_per_batch"):
        assert report[key] > 0
    assert report["seconds_phe_extrapolated"] is True
    assert max(report["max_abs_error"].values()) < 1e-3
