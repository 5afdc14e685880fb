"""What a prompt row is: its shapes (chat `messages`, ShareGPT `conversations`, `turns`, a `prompt` with its
`completion`, raw `text`, or a named column read by what it holds) made into {role, content} messages and a
category, or one DistillError naming the row and the setting to fix. distill/prompts/read.py reads the sources."""

from __future__ import annotations

from typing import NamedTuple, Optional

from distill.errors import DistillError
from distill.prompts.chat import ROLES, TEXT

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
# the prompt field of a row, in order of preference
FIELDS = ("messages", "conversations", "turns", "prompt", "text")
NO_FIELD = "no 'messages', 'conversations' (ShareGPT), 'turns', 'prompt' or 'text' (raw text to continue)"
COMPLETION = "completion"  # a `prompt` row's answer (TRL's prompt-completion datasets)
CATEGORY = "category"  # a row's category (Spec-Bench, MT-Bench): eval reports its figures per category


class Keys(NamedTuple):
    prompts: str  # the setting naming the source, for messages
    split: str  # the setting naming the split
    column: Optional[str]  # the column holding the prompts; None = the first of FIELDS a row has
    completion: bool = False  # a completion prompt set: a row's `prompt` is raw text to continue

    @property
    def column_key(self) -> str:
        return f"{self.prompts}_column"


Row = tuple[list[dict], Optional[str]]  # one row's messages and category


def read_row(row, where: str, keys: Keys) -> Row:
    """Validate one row; return its messages in {role, content} form and its category."""
    if not isinstance(row, dict):
        raise DistillError(f"{where}: expected a JSON object with a 'messages' list, got {type(row).__name__}")
    return _prompt_of(row, where, keys), _category(row.get(CATEGORY), where)


def _prompt_of(row: dict, where: str, keys: Keys) -> list[dict]:
    if keys.column is not None:
        if keys.column not in row:
            raise DistillError(
                f"{where}: no field {keys.column!r}, only {sorted(row)}; set {keys.column_key} to the one holding "
                "the prompts"
            )
        return _by_shape(row[keys.column], where, f"{where}: {keys.column!r} ({keys.column_key})")
    if "messages" in row:
        return _messages(row["messages"], where)
    if "conversations" in row:  # ShareGPT
        turns = row["conversations"]
        if not isinstance(turns, list):
            raise DistillError(f"{where}: 'conversations' must be a list of ShareGPT {{from, value}} turns")
        # real ShareGPT dumps hold rows with no turns: an empty conversation, dropped and counted as one with no
        # user turn (distill), or named as such (eval)
        return [_sharegpt_turn(t, where) for t in turns]
    if "turns" in row:
        return _turns(row["turns"], f"{where}: 'turns'")
    if "prompt" in row and keys.completion:  # a completion prompt set: its prompt is text to continue
        return [{"role": TEXT, "content": row["prompt"]}, *_completion(row, where)]
    if "prompt" in row:
        if not isinstance(row["prompt"], str):
            raise DistillError(
                f"{where}: 'prompt' must be a string (one user turn), got {type(row['prompt']).__name__}; to read "
                f"it by what it holds (turns, messages), set {keys.column_key}=prompt"
            )
        return [{"role": "user", "content": row["prompt"]}, *_completion(row, where)]
    if "text" in row:
        if not isinstance(row["text"], str) or not row["text"]:
            raise DistillError(f"{where}: 'text' must be a non-empty string (raw text the target continues)")
        return [{"role": TEXT, "content": row["text"]}, *_completion(row, where)]
    raise DistillError(f"{where}: {NO_FIELD} field; found {sorted(row)}; or set {keys.column_key}")


def _completion(row: dict, where: str) -> list[dict]:
    """A prompt-completion row's answer as the assistant's message (none without a `completion`)."""
    if row.get(COMPLETION) is None:
        return []
    if not isinstance(row[COMPLETION], str):
        raise DistillError(
            f"{where}: 'completion' must be a string (the answer to 'prompt'), got {type(row[COMPLETION]).__name__}"
        )
    return [{"role": "assistant", "content": row[COMPLETION]}]


def _by_shape(value, where: str, what: str) -> list[dict]:
    """A named column's prompt, by what it holds: a string (one user turn), a list of strings (turns), messages or
    ShareGPT turns."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return _turns(value, what)
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        if all("from" in v for v in value):
            return [_sharegpt_turn(t, where) for t in value]
        return _messages(value, where)
    held = "an empty list" if value == [] else _a(type(value).__name__)
    raise DistillError(
        f"{what} holds {held}; a prompts column holds a string (one user turn), a list of strings (turns), "
        "[{role, content}] messages or ShareGPT [{from, value}] turns"
    )


def _messages(messages, where: str) -> list[dict]:
    """Chat messages in {role, content} form, each content a string (text parts joined)."""
    if not isinstance(messages, list) or not messages:
        raise DistillError(f"{where}: 'messages' must be a non-empty list of {{role, content}} objects")
    out = []
    for number, m in enumerate(messages, 1):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise DistillError(
                f"{where}: each message needs a role in {list(ROLES)} and a string content; got {m!r:.80}"
            )
        out.append({"role": m["role"], "content": _text(m.get("content"), f"{where}: message {number}")})
    return out


def _turns(turns, what: str) -> list[dict]:
    """User turns, with an answer the target owes between each two (written turn by turn: chat.pending_turn)."""
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        if isinstance(turns, list) and turns:
            got = f"a list holding {_a(next(type(t).__name__ for t in turns if not isinstance(t, str)))}"
        else:
            got = "an empty list" if turns == [] else _a(type(turns).__name__)
        raise DistillError(f"{what} must be a non-empty list of strings, one per user turn; got {got}")
    out = [{"role": "user", "content": turns[0]}]
    for turn in turns[1:]:
        out += [{"role": "assistant", "content": None}, {"role": "user", "content": turn}]
    return out


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _category(category, where: str) -> Optional[str]:
    if category is None or isinstance(category, str):
        return category
    if isinstance(category, (int, float)) and not isinstance(category, bool):  # a class label's index
        return str(category)
    raise DistillError(f"{where}: 'category' must be a string (e.g. \"writing\"), got {type(category).__name__}")


def _sharegpt_turn(turn, where: str) -> dict:
    if not isinstance(turn, dict) or turn.get("from") not in _SHAREGPT_ROLES or not isinstance(turn.get("value"), str):
        raise DistillError(
            f"{where}: each ShareGPT turn needs 'from' in {list(_SHAREGPT_ROLES)} and a string 'value'; "
            f"got {turn!r:.80}"
        )
    return {"role": _SHAREGPT_ROLES[turn["from"]], "content": turn["value"]}


def _text(content, where: str) -> str:
    """A string content, or OpenAI-style text parts joined by newlines (as vLLM's chat server joins them)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise DistillError(f"{where} needs a string content (or a list of text parts); got {type(content).__name__}")
    texts = []
    for part in content:
        part_type = part.get("type") if isinstance(part, dict) else type(part).__name__
        if part_type == "text" and not isinstance(part.get("text"), str):
            raise DistillError(f"{where} has a text part without a string 'text'; got {part!r:.80}")
        if part_type != "text":
            raise DistillError(
                f"{where} has a content part of type {part_type!r}; only text parts "
                '({"type": "text", "text": "..."}) are supported: drop the others or the conversation'
            )
        texts.append(part["text"])
    return "\n".join(texts)
