"""Exports in tests are made as the eval stage makes them: the drafter's native checkpoint, then its
family's writer (heads.families), so tests serve and load exactly what runs produce."""

import tempfile
from pathlib import Path

from heads.families import FAMILIES, ExportJob
from heads.formats.staging import staged_directory

VERIFIER = {"name_or_path": "toyworld:micro", "architectures": ["LlamaForCausalLM"]}


def export(
    drafter, out: Path, *, tokenizer=None, verifier=None, num_speculative_tokens: int = 3, engines: tuple = ()
) -> Path:
    family = FAMILIES[drafter.kind]
    with tempfile.TemporaryDirectory() as native:
        if family.trainable:
            drafter.save_pretrained(native)
        job = ExportJob(
            checkpoint=Path(native) if family.trainable else None,
            settings=drafter,
            tokenizer=tokenizer,
            verifier=verifier or VERIFIER,
            num_speculative_tokens=num_speculative_tokens,
            engines=engines,
            answers=drafter.answers if family.from_answers else (),  # the store a retrieval drafter carries
        )
        with staged_directory(out) as tmp:
            family.export(job, tmp)
    return Path(out)
