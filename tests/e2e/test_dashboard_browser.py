"""The dashboard in a real headless Chromium (Debian's chromium + chromium-driver, installed by `make test`'s setup):
the index lists runs and links to each run's page; a run's page, opened while it trains, shows the round counter
moving, validation and test curves, and its privacy in words (a whole-run ε only where the run has one)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from cli.localfed import ADMIN
from tests.support.federation import TINY_CONFIG, federation

ROUNDS = 12


# the pages re-render their tables while runs train: an element found a moment ago may be gone, so look again
REFRESHED = (StaleElementReferenceException,)


def _browser() -> webdriver.Chrome:
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    # Not skipped when missing: `make test` installs both (make system-deps), so absence is a broken setup.
    assert binary and driver, "chromium/chromedriver missing: run `make system-deps` (apt-get install chromium chromium-driver)"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1100,1400"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def _privacy(browser: webdriver.Chrome) -> dict[str, str]:
    """The privacy table as {mechanism: sentence}."""
    rows = browser.find_elements(By.CSS_SELECTOR, "#privacy tbody tr")
    return {cells[0].text: cells[1].text for cells in (r.find_elements(By.TAG_NAME, "td") for r in rows)}


def _points(browser: webdriver.Chrome, key: str) -> int:
    return int(browser.find_element(By.ID, f"curve-{key}").get_attribute("data-points") or 0)


@pytest.mark.slow
def test_dashboard_shows_the_run_while_it_trains(tmp_path: Path) -> None:
    with federation(tmp_path, n_parties=2) as fed:
        run = fed.client.create_run(rounds=ROUNDS, min_parties=2, seed=0, config=TINY_CONFIG)
        browser = _browser()
        try:
            browser.get(f"{fed.coordinator.url}/dashboard/runs/{run['run_id']}#token={ADMIN}")
            assert run["run_id"] in browser.title
            counter = browser.find_element(By.ID, "round-counter")
            wait = WebDriverWait(browser, 120, poll_frequency=0.1, ignored_exceptions=REFRESHED)
            wait.until(lambda _: re.fullmatch(rf"[1-9]\d* / {ROUNDS}", counter.text))
            during = int(counter.text.split(" / ")[0])
            seen_state = browser.find_element(By.ID, "state").text
            curves = browser.find_elements(By.CSS_SELECTOR, "#curve polyline")
            assert curves and all(int(c.get_attribute("data-points") or 0) >= 1 for c in curves)
            # The page refreshes by itself while the run trains: the counter reaches the end.
            wait.until(lambda _: counter.text == f"{ROUNDS} / {ROUNDS}")
            wait.until(lambda _: browser.find_element(By.ID, "state").text == "completed")
            assert _points(browser, "valid_rmse") == _points(browser, "test_rmse") == ROUNDS
            legend = browser.find_element(By.ID, "curve-legend").text
            assert "validation RMSE" in legend and "test RMSE" in legend
            parties = [row.find_element(By.TAG_NAME, "td").text
                       for row in browser.find_elements(By.CSS_SELECTOR, "#bytes tbody tr")]
            assert parties == ["p0", "p1"]
            privacy = _privacy(browser)
            assert privacy["Whole-run differential privacy"].startswith("off — this run has no ε guarantee")
            assert privacy["Secure aggregation"].startswith("on — the coordinator sees sums")
            assert "not a guarantee for the run" in privacy["Quantization bound (per round)"]
            text = browser.find_element(By.ID, "privacy").text
            # The vacuous basic-composition δ is gone, and nothing is dumped as JSON.
            assert "δ spent" not in text and "{" not in text
            assert not browser.find_element(By.ID, "excluded-section").is_displayed()
            assert during < ROUNDS or seen_state == "completed"  # seen mid-run, unless the run outpaced the page
            browser.save_screenshot(str(tmp_path / "dashboard.png"))
        finally:
            browser.quit()


@pytest.mark.slow
def test_index_lists_runs_and_links_to_their_pages(tmp_path: Path) -> None:
    with federation(tmp_path, n_parties=2) as fed:
        base = fed.coordinator.url
        page = httpx.get(f"{base}/dashboard/runs/%3Cscript%3Ex")  # a run id is escaped into the page
        assert "<script>x" not in page.text and "&lt;script&gt;x" in page.text
        index = httpx.get(f"{base}/dashboard")
        assert index.status_code == 200 and "default-src 'self'" in index.headers["content-security-policy"]
        dp_run = fed.client.create_run(rounds=2, min_parties=2, seed=0, config={**TINY_CONFIG, "dp_epsilon": 8})
        assert fed.client.wait(dp_run["run_id"], timeout=120)["state"] == "completed"
        fed.client.register("ghost", "http://127.0.0.1:9")  # registered and enabled, nothing listens there
        plain = fed.client.create_run(rounds=4, min_parties=2, seed=0, config=TINY_CONFIG)
        browser = _browser()
        try:
            wait = WebDriverWait(browser, 120, poll_frequency=0.1, ignored_exceptions=REFRESHED)
            browser.get(f"{base}/dashboard#token=not-the-admin-token")
            wait.until(lambda _: "HTTP 401" in browser.find_element(By.ID, "status").text
                       or "HTTP 403" in browser.find_element(By.ID, "status").text)
            assert browser.find_element(By.ID, "token-form").is_displayed()
            browser.get(f"{base}/dashboard#token={ADMIN}")
            wait.until(lambda _: not browser.find_element(By.ID, "token-form").is_displayed())
            row = f"run-{plain['run_id']}"
            # The index refreshes while the plain run trains, until its row says completed with a best RMSE.
            wait.until(lambda _: "completed" in browser.find_element(By.ID, row).text
                       and "(round" in browser.find_element(By.ID, row).text)
            ids = [r.get_attribute("id") for r in browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")]
            assert ids == [row, f"run-{dp_run['run_id']}"]  # newest first
            cells = [c.text for c in browser.find_elements(By.CSS_SELECTOR, f"#{row} td")]
            assert cells[2] == "4 / 4" and cells[3] == "p0, p1 (left out: ghost)"
            assert re.fullmatch(r"\d+\.\d{4} \(round [0-3]\)", cells[5])
            browser.save_screenshot(str(tmp_path / "index.png"))
            browser.find_element(By.LINK_TEXT, plain["run_id"]).click()
            wait.until(lambda _: browser.find_element(By.ID, "state").text == "completed")
            assert browser.current_url.endswith(f"/dashboard/runs/{plain['run_id']}")
            assert _points(browser, "valid_rmse") == _points(browser, "test_rmse") == 4
            excluded = [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
                        for r in browser.find_elements(By.CSS_SELECTOR, "#excluded tbody tr")]
            assert len(excluded) == 1 and excluded[0][0] == "ghost" and "unreachable" in excluded[0][1]
            browser.save_screenshot(str(tmp_path / "run.png"))
            browser.find_element(By.LINK_TEXT, "← all runs").click()
            wait.until(lambda _: browser.find_elements(By.LINK_TEXT, dp_run["run_id"]))
            browser.find_element(By.LINK_TEXT, dp_run["run_id"]).click()
            wait.until(lambda _: browser.find_element(By.ID, "state").text == "completed")
            whole_run = _privacy(browser)["Whole-run differential privacy"]
            assert re.match(r"on — ε = 8 at δ = 1e-6 for one user-item interaction .*; spent so far: ε = 8$", whole_run)
            browser.save_screenshot(str(tmp_path / "dp-run.png"))
        finally:
            browser.quit()


@pytest.mark.slow
def test_index_lists_releases_and_activates_one(tmp_path: Path) -> None:
    # A wide gate tolerance: the second run's release becomes active whatever its figures, so the first is retired.
    with federation(tmp_path, n_parties=2, release_tolerance=100.0,
                    release_ndcg_tolerance=1.0) as fed:
        for seed in (0, 1):
            run = fed.client.create_run(rounds=2, min_parties=2, seed=seed, config=TINY_CONFIG)
            assert fed.client.wait(run["run_id"], timeout=300)["state"] == "completed"
        admin = {"Authorization": f"Bearer {ADMIN}"}
        before = {r["release_id"]: r["state"] for r in httpx.get(f"{fed.coordinator.url}/v1/releases",
                                                                 headers=admin, timeout=30).json()}
        assert before == {"release-1": "retired", "release-2": "active"}
        browser = _browser()
        try:
            browser.get(f"{fed.coordinator.url}/dashboard#token={ADMIN}")
            wait = WebDriverWait(browser, 60, poll_frequency=0.1, ignored_exceptions=REFRESHED)
            wait.until(lambda _: len(browser.find_elements(By.CSS_SELECTOR, "#releases tbody tr")) == 2)
            assert "active" in browser.find_element(By.ID, "release-release-2").text
            assert not browser.find_elements(By.CSS_SELECTOR, "#release-release-2 button.activate")
            browser.find_element(By.CSS_SELECTOR, "#release-release-1 button.activate").click()
            status = browser.find_element(By.ID, "release-status")
            wait.until(lambda _: "release-1 is active" in status.text)
            assert "rollback" in status.text
            wait.until(lambda _: "active" in browser.find_element(By.ID, "release-release-1").text)
            # the active release's value report, plotted: three bars (alone, federated, served) per party and slice
            active = httpx.get(f"{fed.coordinator.url}/v1/releases/release-1", headers=admin, timeout=30).json()
            report = active["value_report"]
            assert report and all(report.values())
            wait.until(lambda _: "release-1 (active)" in browser.find_element(By.ID, "value-caption").text)
            bars = {(b.get_attribute("data-party"), b.get_attribute("data-slice"), b.get_attribute("data-key")):
                    float(b.get_attribute("data-value") or "nan")
                    for b in browser.find_elements(By.CSS_SELECTOR, "#value-chart rect.value-bar")}
            expected = {(party, row["slice"], key): row[key] for party, rows in report.items() for row in rows
                        for key in ("local_ndcg10", "federated_ndcg10", "served_ndcg10")}
            assert bars.keys() == expected.keys()
            assert all(abs(bars[k] - v) < 1e-9 for k, v in expected.items())
            browser.save_screenshot(str(tmp_path / "value-report.png"))
        finally:
            browser.quit()
        after = {r["release_id"]: r["state"] for r in httpx.get(f"{fed.coordinator.url}/v1/releases",
                                                                headers=admin, timeout=30).json()}
        assert after == {"release-1": "active", "release-2": "retired"}
