"""What the training-free families (n-gram, suffix, lookahead) share: a drafter that is its settings, saved
as one config.json that names its family, and read back only when it does."""

from __future__ import annotations

import json
from pathlib import Path

from heads.errors import HeadsError

CONFIG = "config.json"


class SettingsDrafter:
    kind: str  # drafthub_kind in config.json
    title: str  # "an n-gram drafter": what the refusal calls it

    def config_dict(self) -> dict:
        raise NotImplementedError

    def save_pretrained(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / CONFIG).write_text(json.dumps(self.config_dict(), indent=2))

    @classmethod
    def read_settings(cls, path: str | Path) -> dict:
        """The directory's config.json; HeadsError unless it names this family."""
        file = Path(path) / CONFIG
        config = json.loads(file.read_text()) if file.exists() else {}
        if config.get("drafthub_kind") != cls.kind:
            raise HeadsError(f"{path} is not {cls.title} (its {CONFIG} must say drafthub_kind: {cls.kind})")
        return config
