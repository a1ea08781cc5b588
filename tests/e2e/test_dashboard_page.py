"""The dashboard page in a real headless browser, as a person uses it.

Debian's Chromium and its driver (``make sysdeps`` installs them where apt
is available) run the page served by a real gateway with real workers: the
tiny model, a model whose files cannot be loaded, two MCP servers (one
running, one whose command does not exist) and a configured node nobody
runs. The browser is driven through selenium with the system chromedriver
(nothing is downloaded). The tests type the API key, send traffic and
watch the numbers move, load a model that fails and read its reason,
unload / load / reload with the key and see them refused without it,
save a screenshot (``test-artifacts/dashboard.png``, or under
``$MLXD_TEST_ARTIFACTS``), and finally read the browser's network log:
the page asked nothing of any other host.

Skipped, saying why, where selenium, Chromium or chromedriver is missing.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest

from tests.conftest import API_KEY, ROOT, TINY, start_server
from tests.e2e.test_status import BROKEN, broken_model

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def _first(*names: str) -> str | None:
    """The first of ``names`` that is an existing file or a command on PATH."""
    for name in filter(None, names):
        found = name if os.path.isabs(name) and os.path.exists(name) else shutil.which(name)
        if found:
            return found
    return None


CHROMIUM = _first(os.environ.get("MLXD_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome")
CHROMEDRIVER = _first(os.environ.get("MLXD_CHROMEDRIVER", ""), "chromedriver", "/usr/lib/chromium/chromedriver")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="no headless browser: install Debian's chromium and chromium-driver (`make sysdeps` does where apt "
    "is available), or point MLXD_CHROMIUM / MLXD_CHROMEDRIVER at a Chromium and its driver",
)

ARTIFACTS = Path(os.environ.get("MLXD_TEST_ARTIFACTS", ROOT / "test-artifacts"))
"""Where the screenshot is saved."""

NODE = "mac2"
REMOTE = "remote"


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    import sys

    from shared.sockets import write_key_pair

    tmp = tmp_path_factory.mktemp("dashboard")
    keys = tmp / "keys"
    write_key_pair(keys, "gateway")
    node_public, _ = write_key_pair(keys, "node")
    nodes = (
        f'[[nodes]]\nname = "{NODE}"\naddress = "tcp://127.0.0.1:9"\npublic_key = "{node_public.read_text().strip()}"\n'
    )
    srv = start_server(
        tmp,
        [
            {"name": TINY, "source": str(tiny_model_dir), "aliases": ["small"]},
            {"name": BROKEN, "source": str(broken_model(tiny_model_dir, tmp)), "preload": False},
            {"name": REMOTE, "source": str(tiny_model_dir), "preload": False, "node": NODE},
        ],
        mcp_servers=[
            {"name": "calc", "command": sys.executable, "args": ["-m", "tests.mcp_server"], "cwd": str(ROOT)},
            {"name": "gone", "command": "/nonexistent/mcp-server", "restart_backoff": 0.5},
        ],
        extra=nodes,
        curve_public_key_file=str(keys / "gateway.pub"),
        curve_secret_key_file=str(keys / "gateway.key"),
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser(server):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1800",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    try:
        # without the OpenBLAS that `make test` preloads into its Python processes: Chromium's renderer dies with it
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER, env=env))
    except WebDriverException as exc:
        # a browser that is installed and does not start is a failure, not a reason to skip the page's tests
        pytest.fail(f"Chromium ({CHROMIUM}, driver {CHROMEDRIVER}) did not start: {exc.msg}")
    driver.get(f"{server.url}/dashboard")
    yield driver
    driver.quit()


# -- reading the page --------------------------------------------------------------------


def wait(driver, predicate, timeout: float = 60.0, what: str = "the page"):
    """Wait until ``predicate(driver)`` is truthy (the page re-renders every
    second; stale elements are retried)."""

    def check(d):
        try:
            return predicate(d)
        except StaleElementReferenceException:
            return False

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(check)
    except Exception:
        shown = text(driver, "#notice"), text(driver, "#connection")
        raise AssertionError(f"{what} did not show it; notice and connection lines: {shown}") from None


def text(driver, selector: str) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, selector)
    return found[0].text if found else ""


def field(driver, model: str, name: str) -> str:
    return text(driver, f'tr[data-model="{model}"] [data-field="{name}"]')


def click(driver, selector: str) -> None:
    wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, selector).is_enabled(), what=selector)
    driver.find_element(By.CSS_SELECTOR, selector).click()


def use_key(driver, key: str) -> None:
    box = driver.find_element(By.ID, "api-key")
    box.clear()
    box.send_keys(key)
    driver.find_element(By.ID, "use-key").click()


def renders(driver) -> int:
    return int(driver.execute_script("return Number(document.body.dataset.polls || 0)"))


CHAT_BODY = {"model": TINY, "messages": [{"role": "user", "content": "Tell a long story."}]}
"""A chat request body (a test adds what it needs)."""


def chat(server, content: str, max_tokens: int = 24) -> str:
    """One streamed chat request; returns its id."""
    body = {
        "model": TINY,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": True,
    }
    ids = []
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, headers=server.headers, timeout=60) as r:
        assert r.status_code == 200
        ids = [json.loads(line[6:])["id"] for line in r.iter_lines() if line.startswith("data: {")]
    assert ids and len(set(ids)) == 1
    return ids[0]


# -- the tests, in the order a person would go -------------------------------------------


def test_without_a_key_the_page_asks_for_one(browser):
    wait(browser, lambda d: text(d, "#server-state") == "needs a key", what="the state badge")
    assert "API key" in text(browser, "#connection") and "401" in text(browser, "#connection")
    assert not browser.find_elements(By.CSS_SELECTOR, "tr[data-model]")


def test_with_the_key_every_model_server_and_node_shows(browser, server):
    use_key(browser, API_KEY)
    wait(browser, lambda d: field(d, TINY, "state") == "ready", what="tiny's state")
    assert text(browser, "#server-state") == "ok"
    assert field(browser, BROKEN, "state") == "unloaded" and field(browser, REMOTE, "state") == "unloaded"
    assert field(browser, TINY, "kind") == "generate"
    assert "small" in text(browser, f'tr[data-model="{TINY}"] td')
    assert f"on {NODE}" in text(browser, f'tr[data-model="{REMOTE}"] td')
    assert "MiB" in field(browser, TINY, "memory")
    assert "suffix" in field(browser, TINY, "speculation")  # the default (auto) as the worker runs it
    wait(browser, lambda d: text(d, 'tr[data-mcp="calc"] [data-field="state"]') == "connected", what="MCP calc")
    calc_tools = browser.find_elements(By.CSS_SELECTOR, 'tr[data-mcp="calc"] td')[-1].text
    assert int(calc_tools) > 0
    assert text(browser, 'tr[data-mcp="gone"] [data-field="state"]') == "disconnected"
    assert "nonexistent" in text(browser, 'tr[data-mcp="gone"] .reason')
    node_row = text(browser, f'tr[data-node="{NODE}"]')
    assert "tcp://127.0.0.1:9" in node_row and "idle" in node_row and REMOTE in node_row


def test_traffic_makes_the_numbers_move(browser, server):
    hits_before = field(browser, TINY, "hit-rate")
    # a request that runs until the page has shown it running (then its client leaves)
    long = {**CHAT_BODY, "max_tokens": 1500, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=long, headers=server.headers, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()  # held: a dropped iterator would close the stream (the request aborts)
        next(line for line in lines if line.startswith("data: {"))
        wait(browser, lambda d: "running" in text(d, "#requests tbody"), what="a running request")
    ids = [chat(server, "Say something about the sea." if i % 2 else "Count to ten, slowly.") for i in range(6)]

    def all_listed(d):
        rows = {r.get_attribute("data-request"): r for r in d.find_elements(By.CSS_SELECTOR, "tr[data-request]")}
        return all(
            i in rows and rows[i].find_element(By.CSS_SELECTOR, '[data-field="finish"]').text in ("length", "stop")
            for i in ids
        )

    wait(browser, all_listed, what="the recent requests")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-request="{ids[-1]}"]')
    assert row.find_element(By.CSS_SELECTOR, '[data-field="protocol"]').text == "openai"
    assert int(row.find_element(By.CSS_SELECTOR, '[data-field="prompt"]').text) > 0
    assert int(row.find_element(By.CSS_SELECTOR, '[data-field="completion"]').text) > 0
    # repeated prompts hit the prefix cache
    assert int(row.find_element(By.CSS_SELECTOR, '[data-field="cached"]').text) > 0
    wait(browser, lambda d: field(d, TINY, "hit-rate") not in ("", hits_before), what="the prefix-cache hit rate")

    def peak(d):
        reading = text(d, "#now-tokens")  # "now X · peak Y"
        return reading and float(reading.rsplit(" ", 1)[-1]) > 0

    wait(browser, peak, what="the tokens/s chart")
    assert text(browser, "#now-ttft").startswith("latest p50")
    assert "MiB" in text(browser, "#now-memory")
    painted = browser.execute_script(
        "const c = document.getElementById('chart-tokens');"
        "const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        "let n = 0; for (let i = 3; i < px.length; i += 4) if (px[i]) n++; return n;"
    )
    assert painted > 1000


def test_a_failed_model_shows_its_reason(browser, server):
    click(browser, f'tr[data-model="{BROKEN}"] button[data-action="load"]')
    wait(browser, lambda d: "refused" in text(d, "#notice"), what="the load's answer")
    assert "503" in text(browser, "#notice") and "no_such_family" in text(browser, "#notice")
    wait(browser, lambda d: field(d, BROKEN, "state") == "failed", what="broken's state")
    assert "no_such_family" in field(browser, BROKEN, "error")
    assert "error" in browser.find_element(By.ID, "notice").get_attribute("class")


def test_unload_load_and_reload_with_the_key(browser, server):
    click(browser, f'tr[data-model="{TINY}"] button[data-action="unload"]')
    wait(browser, lambda d: text(d, "#notice") == f"unloaded model {TINY}", what="the unload's answer")
    wait(browser, lambda d: field(d, TINY, "state") == "unloaded", what="tiny's state")
    assert server.worker(TINY)["pid"] is None
    click(browser, f'tr[data-model="{TINY}"] button[data-action="load"]')
    wait(browser, lambda d: text(d, "#notice") == f"loaded model {TINY}", what="the load's answer")
    wait(browser, lambda d: field(d, TINY, "state") == "ready", what="tiny's state")
    click(browser, "#reload-config")
    wait(browser, lambda d: text(d, "#notice") == "no changes", what="the reload's answer")


def test_without_the_key_actions_are_refused(browser, server):
    before = server.worker(TINY)
    browser.find_element(By.ID, "forget-key").click()
    click(browser, "#reload-config")
    wait(browser, lambda d: text(d, "#notice").startswith("reload refused"), what="the reload's refusal")
    assert "401" in text(browser, "#notice")
    click(browser, f'tr[data-model="{TINY}"] button[data-action="unload"]')  # the last table stays on screen
    wait(browser, lambda d: text(d, "#notice").startswith(f"unload {TINY} refused"), what="the unload's refusal")
    assert "401" in text(browser, "#notice")
    wait(browser, lambda d: text(d, "#server-state") == "needs a key", what="the state badge")
    after = server.worker(TINY)
    assert (after["state"], after["pid"]) == ("ready", before["pid"])


def test_screenshot(browser, server):
    use_key(browser, API_KEY)
    chat(server, "One more, for the picture.", max_tokens=32)
    start = renders(browser)
    wait(browser, lambda d: renders(d) >= start + 2 and field(d, TINY, "state") == "ready", what="a fresh render")
    browser.set_window_size(1400, 1350)  # the whole page, without empty space under it
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / "dashboard.png"
    assert browser.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000


def test_the_page_asks_no_other_host(browser, server):
    urls = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] in ("Network.requestWillBeSent", "Network.webSocketCreated"):
            urls.append(message["params"].get("request", {}).get("url") or message["params"].get("url"))
    assert len(urls) > 20  # the page, its two files, and a status poll a second
    origin = server.url + "/"
    assert all(u.startswith(origin) for u in urls), sorted({u for u in urls if not u.startswith(origin)})
    assert {f"{server.url}/dashboard", f"{server.url}/dashboard/dashboard.js"} <= set(urls)
    assert any(u.startswith(f"{server.url}/v1/status") for u in urls)
    assert any(u == f"{server.url}/v1/admin/reload" for u in urls)


KV_BUDGET = {"bytes": 3 << 20, "budget_bytes": 8 << 20, "waiting": 2, "preemptions": 5, "waited": 7, "tokens": 900}
"""A KV budget's ``kv`` object, put into the tiny model's status by the page's own fetch."""

KV_REWRITE = """
const realFetch = window.fetch.bind(window);
window.fetch = async (input, init) => {
  const response = await realFetch(input, init);
  if (!String(input).includes("/v1/status") || !response.ok) return response;
  const body = await response.json();
  for (const m of body.models) if (m.name === %s) m.kv = %s;
  return new Response(JSON.stringify(body), {status: response.status, headers: response.headers});
};
"""
"""A script run before the page's own: its ``/v1/status`` answers carry
:data:`KV_BUDGET` for the tiny model (the page is the same, the data is
what a worker with a KV budget sends)."""


def test_a_kv_budget_shows_under_the_memory(browser, server):
    """With a KV budget (``kv.budget_bytes`` > 0) the memory cell says the KV
    memory in use of its budget, the requests waiting for it and the
    preemptions; a model without a budget shows no such line."""
    script = KV_REWRITE % (json.dumps(TINY), json.dumps(KV_BUDGET))
    added = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": script})
    try:
        browser.refresh()
        use_key(browser, API_KEY)
        wait(browser, lambda d: field(d, TINY, "kv"), what="tiny's KV line")
        assert field(browser, TINY, "kv") == "KV 3.0 MiB / 8.0 MiB · 900 tokens · 2 waiting · 5 preempted"
        assert field(browser, BROKEN, "state") and not field(browser, BROKEN, "kv")
    finally:
        browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": added["identifier"]})
        browser.refresh()
