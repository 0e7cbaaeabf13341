"""The dashboard and the debugger in headless Chromium (skipped without playwright or Chromium).

Screenshots go to a temporary folder, or to ``benchmarks/results/screenshots/``
when ``KFORGE_SAVE_SCREENSHOTS=1``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kforge.server import AuthConfig, ServerConfig
from test_server_support import COUNT_DOWN, Agent, LiveServer, running_server, u64

CHROMIUM = os.environ.get("KFORGE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.slow

#: COUNT_DOWN that first writes "counting" and a control byte (output while it runs).
TALKING_COUNT_DOWN = COUNT_DOWN.replace(
    'done:   .ascii "done"', 'done:   .ascii "done"\nhello:  .ascii "counting\\x01\\n"'
).replace(
    "        LI   r7, 1\n",
    "        LI   r7, 1\n        LI   r1, hello\n        LI   r2, 10\n        SEND 0, r1, r2\n",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    if shutil.which(CHROMIUM) is None:
        pytest.skip(f"no Chromium at {CHROMIUM}")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    config = ServerConfig(auth=AuthConfig(rate_per_second=1000, rate_burst=1000))
    with running_server(config, tier="reference") as server:
        yield server


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    if os.environ.get("KFORGE_SAVE_SCREENSHOTS") == "1":
        folder = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "screenshots"
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    return tmp_path


def new_page(browser: Any) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.errors = errors
    return page


def test_dashboard_shows_a_sandbox_go_from_running_to_halted(
    browser: Any, live: LiveServer, shots: Path
) -> None:
    agent = Agent(live.base_url)
    sandbox = agent.create(TALKING_COUNT_DOWN, input=u64(2_000_000), budget=50_000_000)
    page = new_page(browser)
    page.goto(f"{live.base_url}/dashboard/#token={live.dev_token}")
    page.wait_for_selector(f'tr[data-id="{sandbox}"][data-state="READY"]', timeout=10_000)
    assert page.text_content("#stream-state") == "live"
    agent.ok("POST", f"/v1/sandboxes/{sandbox}/start", {}, 202)
    page.wait_for_selector(f'tr[data-id="{sandbox}"][data-state="RUNNING"]', timeout=10_000)
    page.screenshot(path=str(shots / "dashboard-running.png"))
    detail = new_page(browser)  # the sandbox's own page, opened while it runs: ticks over time
    detail.goto(f"{live.base_url}/dashboard/sandbox.html?id={sandbox}#token={live.dev_token}")
    # the output so far appears while it runs, the control byte escaped
    detail.wait_for_selector("#output:has-text('counting')", timeout=10_000)
    assert agent.ok("GET", f"/v1/sandboxes/{sandbox}")["state"] == "RUNNING"
    assert "done" not in detail.text_content("#output")
    assert detail.text_content("#output .esc") == "\\x01"
    detail.wait_for_selector("#output-state:has-text('so far')", timeout=5_000)
    page.wait_for_selector(f'tr[data-id="{sandbox}"][data-state="HALTED"]', timeout=30_000)
    page.wait_for_selector("#events >> text=SANDBOX_HALTED", timeout=5_000)
    page.screenshot(path=str(shots / "dashboard-halted.png"))
    assert "token" not in page.url  # the token left the address bar

    detail.wait_for_selector("#output[data-final='HALTED']", timeout=10_000)
    assert detail.text_content("#output") == "counting\\x01\ndone"  # appended, not repeated
    assert detail.locator("#chart path.line").count() == 1
    assert (
        detail.get_attribute("#chart path.line", "d").count("L") >= 2
    )  # several samples while running
    detail.screenshot(path=str(shots / "sandbox-page.png"))
    assert page.errors == [] and detail.errors == []
    page.click(f'tr[data-id="{sandbox}"] a')  # the list links to the same page
    page.wait_for_selector("#output:text('done')", timeout=10_000)
    page.close()
    detail.close()
    agent.close()


def test_dashboard_without_a_token_asks_for_one(browser: Any, live: LiveServer) -> None:
    page = new_page(browser)
    page.goto(f"{live.base_url}/dashboard/")
    page.wait_for_selector("#token-input", timeout=5_000)
    page.fill("#token-input", live.dev_token)
    page.click("text=Use token")
    page.wait_for_selector("#who:text('operator')", timeout=5_000)
    page.close()


def test_debugger_steps_and_runs_a_program(browser: Any, live: LiveServer, shots: Path) -> None:
    page = new_page(browser)
    page.goto(f"{live.base_url}/dashboard/debugger.html#token={live.dev_token}")
    page.click("#load")
    page.wait_for_selector("#session-panel:not([hidden])", timeout=5_000)
    assert page.text_content("#pc") == "0"
    page.click("#step")
    page.wait_for_selector("#pc:text-is('1')")
    page.click("#step")
    page.wait_for_selector("#pc:text-is('2')")
    assert page.get_attribute("#r2", "class") == "changed"
    assert page.text_content("#r2") == "r2 = 0x5"
    page.click('#code div[data-index="6"]')  # breakpoint on JNZ
    page.wait_for_selector('#code div[data-index="6"].bp')
    page.click("#run")
    page.wait_for_selector("#stop:text('breakpoint')")
    assert page.text_content("#pc") == "6"
    assert page.get_attribute('#code div[data-index="6"]', "class") == "pc bp"
    assert page.text_content("#r1") == "r1 = 0x5"
    page.screenshot(path=str(shots / "debugger-breakpoint.png"))
    page.click('#code div[data-index="6"]')  # clear it
    page.wait_for_selector('#code div[data-index="6"]:not(.bp)')
    page.fill("#n", "3")
    page.click("#run-n")
    page.wait_for_selector("#stop:text('tick_limit')")
    page.click("#run")
    page.wait_for_selector("#state:has-text('HALTED')", timeout=10_000)
    assert page.text_content("#r1") == "r1 = 0xf"
    assert "00000f" in page.text_content("#stack") or "0xf" in page.text_content("#stack")
    page.screenshot(path=str(shots / "debugger-halted.png"))
    assert page.errors == []
    page.close()


def test_dashboard_lists_program_name_creation_time_and_fault(
    browser: Any, live: LiveServer, shots: Path
) -> None:
    agent = Agent(live.base_url)
    code = agent.ok("POST", "/v1/programs", {"assembly": "FAULT 7", "name": "seven.fasm"}, 201)[
        "program_id"
    ]
    body = {"code": code, "memory_quota": 4096, "tick_budget": 1000}
    sandbox = agent.ok("POST", "/v1/sandboxes", body, 201)["sandbox_id"]
    agent.run_to_end(sandbox)
    page = new_page(browser)
    page.goto(f"{live.base_url}/dashboard/#token={live.dev_token}")
    row = f'tr[data-id="{sandbox}"][data-state="FAULTED"]'
    page.wait_for_selector(row, timeout=10_000)
    assert page.text_content(f"{row} td.program") == "seven.fasm"
    assert page.text_content(f"{row} td.fault") == "USER_FAULT 7"
    created = page.text_content(f"{row} td.created") or ""
    assert re.fullmatch(r"\d{1,2}:\d{2}:\d{2}( [AP]M)?", created), created
    page.screenshot(path=str(shots / "dashboard-table.png"))
    assert page.errors == []
    page.close()
    agent.close()


CALLS = """; a function that calls another
        LI   r1, 0
        CALL twice
        HALT
twice:  CALL once
        CALL once
        RET
once:   LI   r2, 1
        ADD  r1, r1, r2
        RET
"""


def test_debugger_shows_labels_and_steps_over_and_out(
    browser: Any, live: LiveServer, shots: Path
) -> None:
    page = new_page(browser)
    page.goto(f"{live.base_url}/dashboard/debugger.html#token={live.dev_token}")
    page.fill("#source", CALLS)
    page.click("#load")
    page.wait_for_selector("#session-panel:not([hidden])", timeout=5_000)
    labels = [text.strip() for text in page.locator("#code div.label").all_text_contents()]
    assert labels == ["twice:", "once:"]
    assert "CALL twice" in (page.text_content('#code div[data-index="1"]') or "")
    page.click("#step")
    page.wait_for_selector("#pc:text-is('1')")
    page.click("#step-over")  # the whole call to twice
    page.wait_for_selector("#pc:text-is('2')")
    assert page.text_content("#stop") == "step_over"
    assert page.text_content("#r1") == "r1 = 0x2"
    page.click("#load")  # again, into the functions this time
    page.wait_for_selector("#pc:text-is('0')")
    for _ in range(3):
        page.click("#step")
    page.wait_for_selector("#pc:text-is('6')")
    assert page.text_content("#where") == "in once"
    page.click("#step-out")
    page.wait_for_selector("#pc:text-is('4')")
    assert page.text_content("#where") == "in twice+1"
    page.screenshot(path=str(shots / "debugger-step-out.png"))
    assert page.errors == []
    page.close()
