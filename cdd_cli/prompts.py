"""Prompts for `cdd generate`: `--prompt TEXT` or a JSONL file (`--prompts FILE|-`).

Each JSONL line is an object with a non-empty string `prompt` and an optional `id`, which the
records carry as `prompt_id`. Blank lines are skipped. Every problem names its line.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdd_cli.errors import InputError
from cdd_cli.output.jsonl import read_jsonl


@dataclass(frozen=True)
class PromptInput:
    text: str
    id: str | int | None = None
    template: bool = False  # `text` is a template (`cdd_cli.templates`), not a prompt


def check_prompt(text: str, where: str) -> str:
    if not text.strip():
        raise InputError(f"{where}: the prompt is empty")
    check_unicode(text, where)
    return text


def check_prompt_id(prompt_id: object, where: str) -> str | int | None:
    """A prompt's optional id (records carry it as `prompt_id`): a string or an integer, the
    same for a prompts file and an API call."""
    if prompt_id is not None and (
        not isinstance(prompt_id, (str, int)) or isinstance(prompt_id, bool)
    ):
        raise InputError(f"{where}: 'id' must be a string or an integer")
    if isinstance(prompt_id, str):
        check_unicode(prompt_id, f"{where}: 'id'")
    return prompt_id


def check_unicode(text: str, where: str) -> str:
    """`text`, refused where it holds lone surrogates (from a JSON escape or a non-UTF-8
    command line): they are not text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{where}: not valid Unicode text (at character {exc.start})") from None
    return text


# Prompts a run reads at once (each is n samples, a prompt a batch at least): a file past
# these is a mistake or a stream without end, refused before it fills the memory.
MAX_PROMPTS = 100_000
MAX_PROMPT_BYTES = 64 << 20


def read_prompts(source: str) -> list[PromptInput]:
    prompts = []
    for where, item in read_jsonl(source, "object", MAX_PROMPTS, MAX_PROMPT_BYTES):
        if not isinstance(item.get("prompt"), str):
            raise InputError(f"{where}: expected an object with a string 'prompt'")
        prompt_id = check_prompt_id(item.get("id"), where)
        prompts.append(PromptInput(check_prompt(item["prompt"], where), prompt_id))
    return prompts
