"""Stage hashes across upgrades: a setting drafthub adds later must not redo the stages users already finished,
and must redo them once it is set."""

from dataclasses import asdict, dataclass, field

from heads.config import DraftLMConfig
from heads.settings import ADDED, output_settings
from train.config import RunConfig
from train.pipeline import stage_hashes


def _hashes(change=None, drop=None):
    cfg = RunConfig(drafter=DraftLMConfig())
    values = asdict(cfg)
    if drop:
        del values["eval"]["llamacpp"][drop]  # the config as a run made before the setting existed wrote it
    if change:
        values["eval"]["llamacpp"].update(change)
    return stage_hashes(cfg, values)


def test_a_setting_added_later_keeps_finished_stages_at_its_default():
    before_it_existed = _hashes(drop="draft_p_min")
    assert _hashes() == before_it_existed  # upgrading reuses the eval and publish stages
    changed = _hashes(change={"draft_p_min": 0.5})
    assert changed["eval"] != before_it_existed["eval"] and changed["publish"] != before_it_existed["publish"]
    assert changed["train"] == before_it_existed["train"]  # an eval setting retrains nothing


def test_other_settings_count_even_at_their_default():
    @dataclass
    class Settings:
        old: int = 1
        new: int = field(default=0, metadata=ADDED)

    assert output_settings(Settings, {"old": 1, "new": 0}) == {"old": 1}
    assert output_settings(Settings, {"old": 1, "new": 2}) == {"old": 1, "new": 2}
    assert _hashes(change={"speed_repeats": 3})["eval"] != _hashes()["eval"]
