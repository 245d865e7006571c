"""Chat templates: an instruction-tuned model's prompt layout, from its own tokenizer files.

Instruct checkpoints (LLaDA-8B-Instruct, Dream-v0-Instruct, A2D conversions of chat models)
were tuned on prompts wrapped in their template; a bare prompt reads as a document to continue.
The template is the Jinja text that `tokenizer_config.json` (key `chat_template`) or
`chat_template.jinja` holds, rendered as transformers renders it (a sandboxed environment with
trimmed blocks, one user message, the generation prompt added), never as code cdd runs.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from cdd_cli.errors import InputError


def _token(value: object) -> str:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def read_template(directory: Path) -> tuple[str, dict[str, str]]:
    """The directory's chat template and the special tokens it may name (bos_token, ...)."""
    directory = Path(directory)
    config_file = directory / "tokenizer_config.json"
    config: dict = {}
    if config_file.is_file():
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InputError(f"{config_file}: not valid JSON ({exc})") from None
        if not isinstance(config, dict):
            raise InputError(f"{config_file}: expected a JSON object")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    separate = directory / "chat_template.jinja"
    if template is None and separate.is_file():
        template = separate.read_text(encoding="utf-8")
    if not isinstance(template, str) or not template.strip():
        raise InputError(
            f"--chat: {directory} has no chat template (tokenizer_config.json 'chat_template' "
            "or chat_template.jinja); a base model takes the prompt as it is"
        )
    names = ("bos_token", "eos_token", "pad_token", "unk_token")
    return template, {name: _token(config.get(name)) for name in names}


def apply_template(template: str, specials: dict[str, str], prompt: str) -> str:
    """`prompt` as the one user message, followed by the assistant's turn opening."""

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return environment.from_string(template).render(
            messages=[{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            **specials,
        )
    except TemplateError as exc:
        raise InputError(f"--chat: the chat template failed ({exc})") from None
