"""Bridge fidelity: what a caveat does to a level, and that ``unsupported`` is withheld."""

from __future__ import annotations

from butler.config.model import SkillConfig
from butler.skills.builtin import echo
from butler.skills.catalog import Skill, SkillCatalog
from butler.skills.fidelity import LOSSLESS, Fidelity


def test_a_caveat_makes_lossless_adapted_and_is_listed_once() -> None:
    adapted = LOSSLESS.with_caveats("no streaming")
    assert adapted == Fidelity("adapted", ("no streaming",))
    assert adapted.with_caveats("no streaming") is adapted
    assert LOSSLESS.with_caveats() is LOSSLESS
    unsupported = Fidelity("unsupported")
    assert unsupported.with_caveats("x") is unsupported


def test_an_unsupported_skill_is_on_no_card_and_not_callable() -> None:
    def cfg(skill_id: str) -> SkillConfig:
        return SkillConfig(id=skill_id, name=skill_id, capabilities=(skill_id,), expose=True)

    catalog = SkillCatalog([Skill(cfg("ok"), echo),
                            Skill(cfg("gone"), echo, Fidelity("unsupported"))], None)
    assert [s.id for s in catalog.visible(None)] == ["ok"]
    assert catalog.capabilities(None) == ["ok"]
    assert catalog.select(None, skill_id="gone", capabilities=()) is None
