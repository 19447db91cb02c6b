"""Metrics, request ids and JSON logs over real HTTP: a party, a coordinator and a federation run."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session

from api_common.observability import JsonFormatter
from cli.localfed import API_KEY as COORD_API_KEY
from party_api.main import create_app
from services.db.session import make_engine, migrate
from services.party.serving import ServingModel, publish
from tests.support.federation import TINY_CONFIG, federation
from tests.support.party import ADMIN, API_KEY, party_settings
from tests.support.servers import live_server

METRICS_TOKEN = "test-metrics-token-0123456789abcdef0123"


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _model() -> ServingModel:
    return ServingModel(run_id="r1", round_index=0, user_ids=np.array(["u1"]), item_ids=np.array(["i1", "i2"]),
                        h_u=np.ones((1, 2), np.float32), h_v=np.ones((2, 2), np.float32),
                        user_bias=np.zeros(1, np.float32), item_bias=np.zeros(2, np.float32), global_bias=3.0,
                        rating_min=1.0, rating_max=5.0)


def test_party_metrics_need_their_own_token_and_count_routes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'party.db'}"
    migrate(url)
    with live_server(create_app(party_settings(url, metrics_token=METRICS_TOKEN))) as server:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        httpx.post(f"{server.url}/v1/interactions", headers=admin,
                   json={"rows": [{"user_id": "u1", "item_id": "i1", "rating": 4}]}).raise_for_status()
        engine = make_engine(url)
        with Session(engine) as session:
            publish(session=session, model=_model())
        engine.dispose()
        answer = httpx.get(f"{server.url}/v1/users/u1/recommendations", headers={"X-API-Key": API_KEY,
                                                                                 "X-Request-ID": "trace-7"})
        assert answer.status_code == 200 and answer.headers["X-Request-ID"] == "trace-7"
        assert len(httpx.get(f"{server.url}/health").headers["X-Request-ID"]) == 32  # a fresh id when none is sent
        assert httpx.get(f"{server.url}/metrics").status_code == 401
        assert httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 403
        scraped = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert scraped.status_code == 200
    samples = _samples(scraped.text)
    route = (("method", "GET"), ("route", "/v1/users/{user_id}/recommendations"), ("status", "200"))
    assert samples[("fedrec_http_request_duration_seconds_count", route)] == 1.0
    assert samples[("fedrec_http_request_duration_seconds_count",
                    (("method", "GET"), ("route", "/metrics"), ("status", "401")))] == 1.0
    assert samples[("fedrec_serving_model_version", ())] == 1.0
    assert samples[("fedrec_http_requests_in_flight", ())] == 1.0  # the scrape itself


def test_metrics_are_off_without_a_token(party: object) -> None:
    assert httpx.get(f"{party.url}/metrics").status_code == 404  # type: ignore[attr-defined]


def test_json_log_lines_carry_the_request_id() -> None:
    record = logging.LogRecord("fedrec.http", logging.INFO, __file__, 1, "request", None, None)
    record.request_id, record.status = "abc", 200
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "request" and line["request_id"] == "abc" and line["status"] == 200
    assert line["level"] == "info" and line["ts"].endswith("Z")


@pytest.mark.slow
def test_one_round_is_followed_across_services_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="fedrec.http")
    with federation(tmp_path, n_parties=2, metrics_token=METRICS_TOKEN) as fed:
        run = fed.client.create_run(rounds=2, min_parties=2, seed=0, config={**TINY_CONFIG, "dp_epsilon": 8})
        status = fed.client.wait(run["run_id"], timeout=180)
        assert status["state"] == "completed"
        # Serving fan-out: the caller's request id reaches every party.
        answer = fed.http.get(f"{fed.coordinator.url}/v1/users/user-1/recommendations",
                              headers={"X-API-Key": COORD_API_KEY, "X-Request-ID": "app-req-1"})
        assert answer.status_code == 200, answer.text
        scraped = fed.http.get(f"{fed.coordinator.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    party_lines = [r for r in caplog.records if getattr(r, "service", None) == "party"]
    round_id = f"{run['run_id']}.r1.a0"  # each party logged the round's steps under the round's id
    steps = {r.route for r in party_lines if r.request_id == round_id}  # type: ignore[attr-defined]
    assert "/v1/federation/runs/{run_id}/rounds/{round_index}/steps/{step}" in steps  # every step of the round
    assert sum(1 for r in party_lines if r.request_id == "app-req-1") == 2  # type: ignore[attr-defined]
    samples = _samples(scraped.text)
    assert samples[("fedrec_rounds_completed_total", (("run_id", run["run_id"]),))] == 2.0
    assert samples[("fedrec_round_duration_seconds_count", ())] == 2.0
    for party_id in ("p0", "p1"):
        for direction in ("sent", "received"):
            key = ("fedrec_round_party_bytes_count", (("direction", direction), ("party", party_id)))
            assert samples[key] == 2.0
            assert samples[("fedrec_round_party_bytes_sum", key[1])] > 0
    assert samples[("fedrec_run_privacy_spent", (("parameter", "delta"), ("run_id", run["run_id"])))] == \
        pytest.approx(2 / 3)
    # the whole-run DP guarantee the run status reports, spent once the parties released their data
    dp_spent = samples[("fedrec_run_dp_spent", (("parameter", "epsilon"), ("run_id", run["run_id"])))]
    assert dp_spent == pytest.approx(status["privacy"]["epsilon_spent"]) and 7.99 < dp_spent <= 8.0
    assert samples[("fedrec_run_dp_spent", (("parameter", "delta"), ("run_id", run["run_id"])))] == \
        pytest.approx(status["privacy"]["differential_privacy"]["delta"])


def test_the_fast_request_line_is_the_formatters_line() -> None:
    """The middleware writes its request line itself (no dict, no LogRecord): the same JSON JsonFormatter
    writes, strings escaped the same way (a caller's request id or path with quotes, backslashes, non-ASCII)."""
    from api_common.observability import Observability, _ObservedRequests, log
    from services.protocol.tracing import request_id_var

    middleware = _ObservedRequests(lambda *_: None, observability=Observability(service="party", metrics_token=None))
    fields = {"method": "GET", "route": "/v1/users/{user_id}", "status": 404, "path": '/v1/users/u:"\\é\x01',
              "duration_ms": 1.25, "request_id": 'id "quoted" \\ back', "service": "party"}
    line = json.loads(middleware._line(fields))
    record = logging.LogRecord(log.name, logging.INFO, __file__, 1, "request", None, None)
    record.__dict__.update(fields)
    token = request_id_var.set(fields["request_id"])  # bound during the request, as the middleware does
    try:
        expected = json.loads(JsonFormatter().format(record))
    finally:
        request_id_var.reset(token)
    assert list(line) == list(expected) and {k: v for k, v in line.items() if k != "ts"} == \
        {k: v for k, v in expected.items() if k != "ts"}
    assert line["ts"].endswith("Z") and len(line["ts"]) == len(expected["ts"])
