"""Prompts for `cdd generate`: `--prompt TEXT` or a JSONL file (`--prompts FILE|-`).

Each JSONL line is an object with a non-empty string `prompt` and an optional `id`, which the
records carry as `prompt_id`. Blank lines are skipped. Every problem names its line.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from cdd_cli.errors import InputError


@dataclass(frozen=True)
class PromptInput:
    text: str
    id: str | int | None = None


def check_prompt(text: str, where: str) -> str:
    if not text.strip():
        raise InputError(f"{where}: the prompt is empty")
    return text


def read_prompts(source: str) -> list[PromptInput]:
    where = "stdin" if source == "-" else source
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise InputError(f"--prompts {source}: cannot read ({exc.strerror})") from None
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"--prompts {where}: not UTF-8 (byte {exc.start})") from None
    prompts = []
    for number, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{where}:{number}: not a JSON object ({exc.msg})") from None
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
            raise InputError(f"{where}:{number}: expected an object with a string 'prompt'")
        prompt_id = item.get("id")
        if prompt_id is not None and not isinstance(prompt_id, (str, int)):
            raise InputError(f"{where}:{number}: 'id' must be a string or an integer")
        prompts.append(PromptInput(check_prompt(item["prompt"], f"{where}:{number}"), prompt_id))
    if not prompts:
        raise InputError(f"--prompts {where}: no prompts")
    return prompts
