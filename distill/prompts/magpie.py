"""Training prompts written by the target itself (Magpie, arXiv 2406.08464): given its chat template up to where a
user's message begins, an instruct model writes a user's request; the distill stage then samples its answer as for
any prompt. No dataset is downloaded, and the requests follow the target's own idea of what users ask.

`data.prompts=magpie` writes `data.max_prompts` distinct requests into the dataset directory (magpie.jsonl, with the
settings that wrote it in magpie.json; written whole, then reused). A request cut at the length cap, empty, or of
fewer than three words is dropped; so is a repeat, judged by its normalized text and by its opening words (a model
that starts many requests alike is asked again).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tqdm.auto import tqdm

from distill.errors import DistillError
from heads.formats.staging import atomic_write_text

SOURCE = "magpie"
FILE, SETTINGS_FILE = "magpie.jsonl", "magpie.json"
SENTINEL = "\u2063drafthub-request\u2063"  # invisible separators: text no template adds on its own
OPENING_WORDS = 8  # requests that open with the same words count as one
MIN_WORDS = 3
TRIES_PER_REQUEST = 4  # sampled requests per one asked for, at most, before the shortfall is refused


NEEDS_INSTRUCT = (
    "Magpie needs an instruction-tuned target with its chat template (its requests are what the target writes where "
    "a user's turn begins)"
)
NO_MAGPIE_FIX = (
    'give prompts instead: raw text to continue for a base model ({"text": …} rows, data.prompts=stdlib_continue) '
    "or a corpus (data.source=corpus)"
)


def query_prefix(tokenizer) -> list[int]:
    """The ids of the chat template's text up to where a user's message begins (with any default system prompt)."""
    if not tokenizer.chat_template:
        raise DistillError(f"data.prompts=magpie: the target has no chat template; {NEEDS_INSTRUCT}; {NO_MAGPIE_FIX}")
    text = tokenizer.apply_chat_template([{"role": "user", "content": SENTINEL}], tokenize=False)
    if SENTINEL not in text:
        raise DistillError(
            "data.prompts=magpie needs a chat template that writes the user's message as it is; this one does not "
            "(set target.chat_template, or give a prompts file)"
        )
    return tokenizer.encode(text[: text.index(SENTINEL)], add_special_tokens=False)


def write_requests(sampler, tokenizer, count: int, seed: int, batch_size: int) -> list[str]:
    """`count` distinct requests the target writes, sampled batch by batch (each batch's seed from `seed`)."""
    prefix, seen, requests = query_prefix(tokenizer), set(), []
    batches = -(-count * TRIES_PER_REQUEST // batch_size)
    with tqdm(total=count, desc="magpie", unit="request") as bar:
        for batch in range(batches):
            for ids, reason in sampler.sample([prefix] * batch_size, seed=seed + batch):
                text = tokenizer.decode(ids, skip_special_tokens=True).strip()
                words = re.findall(r"\w+", text.lower())
                keys = {" ".join(words), " ".join(words[:OPENING_WORDS])}
                if reason != "stop" or len(words) < MIN_WORDS or keys & seen:
                    continue
                seen |= keys
                requests.append(text)
            bar.update(min(len(requests), count) - bar.n)
            if len(requests) >= count:
                return requests[:count]
    raise DistillError(
        f"the target wrote {len(requests)} distinct requests in {batches * batch_size} tries, fewer than "
        f"data.max_prompts={count}; {NEEDS_INSTRUCT}, and a base model rarely ends a request: {NO_MAGPIE_FIX}. "
        "For an instruct model: lower data.max_prompts, raise data.magpie.max_new_tokens, or add prompts (data.mix)"
    )


def requests_file(out_dir: Path, settings: dict, make) -> Path:
    """out_dir/magpie.jsonl for these settings: reused when magpie.json says it was written with them, else written
    by `make()` (a list of requests), the requests first and their settings last."""
    path, record = Path(out_dir) / FILE, Path(out_dir) / SETTINGS_FILE
    if path.is_file() and record.is_file() and json.loads(record.read_text()) == settings:
        return path
    record.unlink(missing_ok=True)
    rows = [{"messages": [{"role": "user", "content": text}]} for text in make()]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    atomic_write_text(record, json.dumps(settings, sort_keys=True))
    return path
