"""The dashboards the way a person sees them: Debian's Chromium, headless, driven by
Playwright, against real daemons on port 0 (home delegates to office).

The page is signed into through its form; the test reads the rendered text of each
section, takes a screenshot and checks its pixels, and checks where the token is kept.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from tests.delegation_support import Mesh, skill
from tests.png_support import read_png
from tests.registry.registry_support import TOKENS, auth, make_card, sqlite_registry
from tests.support import ECHO, call, command_skill, post_task, wait_task

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium; "
                             ".ci/run installs it)")
BAR = (0x1F, 0x3A, 0x5F)  # the header's colour (dashboard.css, --bar)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    assert CHROMIUM is not None
    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield chromium
        finally:
            await chromium.close()


async def _page(browser: Browser, problems: list[str]) -> Page:
    page = await browser.new_page(viewport={"width": 1200, "height": 900})
    # A blocked script or style (the Content-Security-Policy) shows up as a console error.
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    return page


async def _sign_in(page: Page, token: str) -> None:
    await page.fill("#token", token)
    await page.click("#login button[type=submit]")


async def _wrong_token_is_refused(page: Page, problems: list[str]) -> None:
    await _sign_in(page, "not-the-token")
    await expect(page.locator("#login-error")).to_contain_text("unauthenticated")
    assert await page.is_hidden("#board")
    assert await page.evaluate("sessionStorage.length") == 0
    assert all("401" in problem for problem in problems), problems  # the browser's note
    problems.clear()


async def _looks_right(page: Page, path: Path, width: int = 1200, height: int = 900) -> None:
    """The screenshot: the viewport's size, the header bar in its colour (the stylesheet
    loaded), and text and tables rather than a blank page; nothing wider than the screen."""
    shot = read_png(await page.screenshot(path=path))
    assert (shot.width, shot.height) == (width, height)
    assert shot.pixel(4, 4) == BAR
    assert len(shot.colours()) > 20
    assert await page.evaluate("document.documentElement.scrollWidth") <= width


async def _token_kept_in_the_tab_only(page: Page, token: str) -> None:
    assert token not in page.url and "token" not in page.url
    assert await page.evaluate("document.cookie") == ""
    assert await page.context.cookies() == []
    assert await page.evaluate("sessionStorage.getItem('butler.token')") == token


async def test_the_daemon_dashboard_in_a_browser(mesh: Mesh, browser: Browser,
                                                 tmp_path: Path) -> None:
    release = tmp_path / "go"
    held = f"while [ ! -e {release} ]; do sleep 0.05; done; echo released"
    wait = command_skill("home.wait", ["sh", "-c", held])
    mesh.agent("home", skills=[ECHO, wait],
               callers={"operator": {"tier": "admin", "limits": {"max_usd_per_day": "10"}},
                        "viewer": {}})
    mesh.agent("office", skills=[skill("office.echo", "0.03"), command_skill(
        "office.wait", ["sh", "-c", held], capabilities=["office.wait"])])
    mesh.link("home", "office", ["office.echo", "office.wait"])
    home = (await mesh.start())["home"]
    token = home.tokens["operator"]
    text = "hello office <b>not bold</b> " + "and more " * 40
    _, done = await post_task(home, {"task": text, "capabilities_needed": ["office.echo"]})
    done = await wait_task(home, done["id"])
    assert done["state"] == "completed", done
    _, running = await post_task(home, {"task": "wait", "skill": "home.wait", "mode": "async"})
    _, away = await post_task(home, {"task": "wait there", "capabilities_needed": ["office.wait"],
                                     "mode": "async"})
    problems: list[str] = []
    page = await _page(browser, problems)
    try:
        await page.clock.install()  # the stale check below moves the page's time on
        response = await page.goto(f"{home.url}/dashboard")
        assert response is not None and response.status == 200
        policy = response.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "unsafe-inline" not in policy

        await _wrong_token_is_refused(page, problems)

        await _sign_in(page, token)
        await expect(page.locator("#recent")).to_contain_text(done["id"])
        await expect(page.locator("#running")).to_contain_text(running["id"])
        await expect(page.locator("#running")).to_contain_text("waiting on office")
        await expect(page.locator("#peers")).to_contain_text("office")
        assert await page.is_hidden("#login")

        recent = await page.inner_text("#recent")
        assert "completed" in recent and "0.03 of 5.00 USD" in recent
        # Who asked, what (as text: the markup in it is not markup; cut short), the trace.
        assert "\toperator\t" in recent and done["swarm"]["trace_id"] in recent
        shown = await page.locator("#recent .text").first.inner_text()
        assert shown.startswith("hello office <b>not bold</b> and more")
        assert shown.endswith("…") and len(shown) == 200
        assert await page.locator("#recent b").count() == 0
        started = await page.locator("#recent time").first.get_attribute("datetime")
        assert started == done["created_at"]
        # The delegation tree: home's hop, office's nested below it, cost and time each.
        hops = page.locator("#recent ul.tree > li")
        assert (await hops.first.locator(":scope > .hop").inner_text()).startswith(
            "home / a2a.delegate: ")
        office_hop = await hops.first.locator("ul > li > .hop").inner_text()
        assert office_hop.startswith("office / office.echo: 0.03 USD, ")
        assert " ms, completed" in office_hop
        running_text = await page.inner_text("#running")
        assert "working" in running_text
        # The hop is the peer's place in the caller chain the delegation carries.
        assert "waiting on office (hop 2: operator → home → office) for " in running_text
        # Peers: statistics named for what they measure, from the audit trail.
        heads = await page.locator("#peers th").all_inner_texts()
        assert [h.lower() for h in heads[3:8]] == [
            "health now", "delegations (24 h)", "median time", "95th percentile",
            "errors by code"]
        cells = await page.locator("#peers tbody tr").first.locator("td").all_inner_texts()
        assert cells[0] == "office" and cells[3] == "ok" and cells[4] == "1"
        assert cells[5].endswith(" ms") and cells[6].endswith(" ms") and cells[7] == "none"
        spend = await page.inner_text("#spend")
        # Spent since start: the finished task; the day's window also holds what the running
        # tasks reserved (5.00, then the 4.97 the cap left).
        assert "operator\t0.03 USD\t" in spend
        assert "10.00 of 10 USD, 3 tasks" in spend and "2 holding 9.97 USD" in spend

        await _looks_right(page, tmp_path / "dashboard.png")
        await _token_kept_in_the_tab_only(page, token)
        assert problems == []

        # Updates stop (the daemon does not answer): the page says its data is stale.
        assert await page.is_hidden("#stale")
        await page.route("**/v2/**", lambda route: route.abort())
        await page.clock.fast_forward(10_000)
        await expect(page.locator("#stale")).to_be_visible()
        await expect(page.locator("#stale")).to_contain_text("Stale: no update for")
        assert await page.evaluate("document.body.classList.contains('stale')")
        await page.unroute("**/v2/**")
        await page.clock.fast_forward(3_000)
        await expect(page.locator("#stale")).to_be_hidden()
        problems.clear()  # the aborted requests' console notes

        # A phone's width: one column, nothing wider than the screen, the same facts.
        await page.set_viewport_size({"width": 375, "height": 812})
        await _looks_right(page, tmp_path / "dashboard-phone.png", 375, 812)
        caller = page.locator("#recent td[data-label=Caller]").first
        assert await caller.is_visible() and await caller.inner_text() == "operator"
        box = await page.locator("#recent .text").first.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375
        assert await page.locator("#recent thead").is_hidden()

        await page.set_viewport_size({"width": 1200, "height": 900})
        await page.click("#signout")
        await expect(page.locator("#login")).to_be_visible()
        assert await page.evaluate("sessionStorage.length") == 0

        # A caller that is not admin: its own tasks (none), and no peers or spend.
        await _sign_in(page, home.tokens["viewer"])
        await expect(page.locator("#peers")).to_contain_text("need a token of tier admin")
        assert "No task is running." in await page.inner_text("#running")
        assert done["id"] not in await page.inner_text("#recent")
        assert "operator" not in await page.inner_text("#spend")
    finally:
        release.write_text("")
    await wait_task(home, running["id"])
    await wait_task(home, away["id"])


async def test_the_overview_is_for_admins_only(mesh: Mesh) -> None:
    mesh.agent("home", callers={"viewer": {}})
    home = (await mesh.start())["home"]
    status, body = await call(home, "GET", "/v2/overview", who="viewer")
    assert status == 403 and body["error"]["code"] == "forbidden"
    async with home.session.get(f"{home.url}/v2/overview") as resp:
        assert resp.status == 401
    async with home.session.get(f"{home.url}/dashboard/dashboard.js") as resp:
        assert resp.status == 200 and resp.content_type == "text/javascript"
        assert resp.headers["X-Content-Type-Options"] == "nosniff"


async def test_the_registry_dashboard_in_a_browser(browser: Browser, tmp_path: Path,
                                                   http: aiohttp.ClientSession) -> None:
    async with sqlite_registry(tmp_path) as registry:
        async with http.put(f"{registry.url}/v1/agents/office", headers=auth("alice"),
                            json={"card": make_card(), "url": "http://127.0.0.1:8081"}) as resp:
            assert resp.status == 201, await resp.text()
        problems: list[str] = []
        page = await _page(browser, problems)
        response = await page.goto(f"{registry.url}/dashboard")
        assert response is not None and response.status == 200
        await _wrong_token_is_refused(page, problems)

        await _sign_in(page, TOKENS["bob"])
        await expect(page.locator("#agents")).to_contain_text("office")
        row = await page.inner_text("#agents tbody tr")
        assert row.startswith("office (Office)\thttp://127.0.0.1:8081\tmemory.search\t")
        assert "\talice\t" in row
        await _looks_right(page, tmp_path / "registry.png")
        await _token_kept_in_the_tab_only(page, TOKENS["bob"])
        assert problems == []
