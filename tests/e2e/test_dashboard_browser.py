"""The run dashboard in a real headless Chromium (Debian's chromium + chromium-driver, installed by `make test`'s
setup): opened while a run trains, it shows the round counter moving and the validation curve."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from cli.localfed import ADMIN
from tests.support.federation import TINY_CONFIG, federation

ROUNDS = 12


def _browser() -> webdriver.Chrome:
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    # Not skipped when missing: `make test` installs both (make system-deps), so absence is a broken setup.
    assert binary and driver, "chromium/chromedriver missing: run `make system-deps` (apt-get install chromium chromium-driver)"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1000,900"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


@pytest.mark.slow
def test_dashboard_shows_the_run_while_it_trains(tmp_path: Path) -> None:
    with federation(tmp_path, n_parties=2) as fed:
        run = fed.client.create_run(rounds=ROUNDS, min_parties=2, seed=0, config=TINY_CONFIG)
        browser = _browser()
        try:
            browser.get(f"{fed.coordinator.url}/dashboard/runs/{run['run_id']}#token={ADMIN}")
            assert run["run_id"] in browser.title
            counter = browser.find_element(By.ID, "round-counter")
            wait = WebDriverWait(browser, 120, poll_frequency=0.1)
            wait.until(lambda _: re.fullmatch(rf"[1-9]\d* / {ROUNDS}", counter.text))
            during = int(counter.text.split(" / ")[0])
            seen_state = browser.find_element(By.ID, "state").text
            curves = browser.find_elements(By.CSS_SELECTOR, "#curve polyline")
            assert curves and all(int(c.get_attribute("data-points") or 0) >= 1 for c in curves)
            # The page refreshes by itself while the run trains: the counter reaches the end.
            wait.until(lambda _: counter.text == f"{ROUNDS} / {ROUNDS}")
            wait.until(lambda _: browser.find_element(By.ID, "state").text == "completed")
            points = browser.find_element(By.CSS_SELECTOR, "#curve polyline").get_attribute("data-points")
            assert int(points or 0) == ROUNDS
            parties = [row.find_element(By.TAG_NAME, "td").text
                       for row in browser.find_elements(By.CSS_SELECTOR, "#bytes tbody tr")]
            assert parties == ["p0", "p1"]
            assert "δ spent" in browser.find_element(By.ID, "privacy").text
            assert during < ROUNDS or seen_state == "completed"  # seen mid-run, unless the run outpaced the page
            browser.save_screenshot(str(tmp_path / "dashboard.png"))
        finally:
            browser.quit()
