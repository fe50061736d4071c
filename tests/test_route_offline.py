"""``butler route`` offline, as docs/intent.md and docs/lan.md run it: no peer is called,
so the peers' token variables need not be set (issue 39)."""

from __future__ import annotations

from tests.support import REPO, run_cli


async def test_route_offline_needs_no_peer_token() -> None:
    code, out, err = await run_cli(
        "route", "check with my office Butler for any pending action items",
        "-c", str(REPO / "examples" / "home.yaml"))
    assert code == 0, err
    assert out.splitlines()[-1].startswith("chosen: office"), out


async def test_route_with_cards_still_needs_the_token() -> None:
    code, _, err = await run_cli(
        "route", "pending action items", "--cards",
        "-c", str(REPO / "examples" / "home.yaml"))
    assert code == 2 and "BUTLER_OFFICE_TOKEN" in err, err
