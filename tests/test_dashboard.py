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


async def _looks_right(page: Page, path: Path) -> None:
    """The screenshot: the viewport's size, the header bar in its colour (the stylesheet
    loaded), and text and tables rather than a blank page."""
    shot = read_png(await page.screenshot(path=path))
    assert (shot.width, shot.height) == (1200, 900)
    assert shot.pixel(4, 4) == BAR
    assert len(shot.colours()) > 20


async def _token_kept_in_the_tab_only(page: Page, token: str) -> None:
    assert token not in page.url and "token" not in page.url
    assert await page.evaluate("document.cookie") == ""
    assert await page.context.cookies() == []
    assert await page.evaluate("sessionStorage.getItem('butler.token')") == token


async def test_the_daemon_dashboard_in_a_browser(mesh: Mesh, browser: Browser,
                                                 tmp_path: Path) -> None:
    release = tmp_path / "go"
    wait = command_skill("home.wait", ["sh", "-c", f"while [ ! -e {release} ]; do "
                                                   "sleep 0.05; done; echo released"])
    mesh.agent("home", skills=[ECHO, wait],
               callers={"operator": {"tier": "admin", "limits": {"max_usd_per_day": "10"}},
                        "viewer": {}})
    mesh.agent("office", skills=[skill("office.echo", "0.03")])
    mesh.link("home", "office", ["office.echo"])
    home = (await mesh.start())["home"]
    token = home.tokens["operator"]
    _, done = await post_task(home, {"task": "hello office",
                                     "capabilities_needed": ["office.echo"]})
    done = await wait_task(home, done["id"])
    assert done["state"] == "completed", done
    _, running = await post_task(home, {"task": "wait", "skill": "home.wait", "mode": "async"})
    problems: list[str] = []
    page = await _page(browser, problems)
    try:
        response = await page.goto(f"{home.url}/dashboard")
        assert response is not None and response.status == 200
        policy = response.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "unsafe-inline" not in policy

        await _wrong_token_is_refused(page, problems)

        await _sign_in(page, token)
        await expect(page.locator("#recent")).to_contain_text(done["id"])
        await expect(page.locator("#running")).to_contain_text(running["id"])
        await expect(page.locator("#peers")).to_contain_text("office")
        assert await page.is_hidden("#login")

        recent = await page.inner_text("#recent")
        assert "completed" in recent and "0.03 of 5.00 USD" in recent
        # The delegation tree: home's hop, office's nested below it, cost and time each.
        hops = page.locator("#recent ul.tree > li")
        assert (await hops.first.locator(":scope > .hop").inner_text()).startswith(
            "home / a2a.delegate: ")
        office_hop = await hops.first.locator("ul > li > .hop").inner_text()
        assert office_hop.startswith("office / office.echo: 0.03 USD, ")
        assert " ms, completed" in office_hop
        assert "working" in await page.inner_text("#running")
        peers = await page.inner_text("#peers")
        assert "office" in peers and "ok" in peers and " ms" in peers and "completed 1" in peers
        spend = await page.inner_text("#spend")
        # Spent since start: the finished task; the day's window also holds the whole
        # budget the running task reserved.
        assert "operator\t0.03 USD\t" in spend
        assert "5.03 of 10 USD, 2 tasks" in spend and "1 holding 5.00 USD" in spend

        await _looks_right(page, tmp_path / "dashboard.png")
        await _token_kept_in_the_tab_only(page, token)
        assert problems == []

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
