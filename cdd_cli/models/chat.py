"""Chat templates: an instruction-tuned model's prompt layout, from its own tokenizer files.

Instruct checkpoints (LLaDA-8B-Instruct, Dream-v0-Instruct, A2D conversions of chat models)
were tuned on prompts wrapped in their template; a bare prompt reads as a document to continue.
The template is the Jinja text that `tokenizer_config.json` (key `chat_template`) or
`chat_template.jinja` holds, rendered as transformers renders it (a sandboxed environment with
trimmed blocks, one user message, the generation prompt added), never as code cdd runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from cdd_cli.errors import InputError

try:  # POSIX only: Windows has no resource limits
    import resource
except ImportError:
    resource = None  # type: ignore[assignment]


def _token(value: object) -> str:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


MAX_TEMPLATE_FILE = 64 << 20  # tokenizer_config.json lists added tokens: a few MB at most


def read_bounded(path: Path) -> str:
    """A tokenizer file's text, refused past MAX_TEMPLATE_FILE (before it is read whole)."""
    with path.open("rb") as f:
        data = f.read(MAX_TEMPLATE_FILE + 1)
    if len(data) > MAX_TEMPLATE_FILE:
        raise InputError(f"{path}: larger than {MAX_TEMPLATE_FILE >> 20} MiB")
    return data.decode("utf-8")


def chat_error(problem: str) -> InputError:
    """A problem with the chat template: `chat` to an API caller, `--chat` on the command line."""
    return InputError(f"chat: {problem}", cli=f"--chat: {problem}")


def read_template(directory: Path) -> tuple[str, dict[str, str]]:
    """The directory's chat template and the special tokens it may name (bos_token, ...)."""
    directory = Path(directory)
    config_file = directory / "tokenizer_config.json"
    config: dict = {}
    if config_file.is_file():
        try:
            config = json.loads(read_bounded(config_file))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            problem = " ".join(str(exc).split())[:160] or type(exc).__name__
            raise InputError(f"{config_file}: not valid JSON ({problem})") from None
        if not isinstance(config, dict):
            raise InputError(f"{config_file}: expected a JSON object")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    separate = directory / "chat_template.jinja"
    if template is None and separate.is_file():
        try:
            template = read_bounded(separate)
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{separate}: cannot read ({exc})") from None
    if not isinstance(template, str) or not template.strip():
        raise chat_error(
            f"{directory} has no chat template (tokenizer_config.json 'chat_template' or "
            "chat_template.jinja); a base model takes the prompt as it is"
        )
    names = ("bos_token", "eos_token", "pad_token", "unk_token")
    return template, {name: _token(config.get(name)) for name in names}


# What rendering a template may take. A chat template is the model folder's code, run in
# jinja2's sandbox (no attribute of Python's internals, no file, no import), which does not
# bound time or memory: `{{ 'a' * 10**10 }}`, loops in loops, a macro doubling a string. The
# templates of real instruct models render one message in milliseconds, into a few hundred
# characters.
RENDER_SECONDS = 5.0
RENDER_MEMORY = 256 << 20  # bytes the process may grow by while rendering (where it can tell)
MAX_RENDERED = 1 << 20  # characters: far past any prompt a model's length holds
MAX_SEQUENCE = 1 << 20  # characters (or items) a `*` may make


class TemplateLimit(Exception):
    """Rendering went past one of the limits above."""


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """jinja2's immutable sandbox, with `*` and `**` refused where their result would be huge
    (the sandbox lets `{{ 'a' * 10**10 }}` allocate 10 GB)."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context, operator: str, left, right):  # jinja2's hook
        if operator == "**" and isinstance(right, int) and abs(right) > 64:
            raise TemplateLimit(f"a power of {right} is more than the template may compute")
        if operator == "*":
            for sequence, count in ((left, right), (right, left)):
                repeated = isinstance(sequence, (str, list, tuple)) and isinstance(count, int)
                if repeated and len(sequence) * count > MAX_SEQUENCE:
                    raise TemplateLimit(
                        f"a repetition of {len(sequence) * count:,} characters or items is "
                        f"more than the {MAX_SEQUENCE:,} a template may make"
                    )
        return super().call_binop(context, operator, left, right)


def apply_template(template: str, specials: dict[str, str], prompt: str) -> str:
    """`prompt` as the one user message, followed by the assistant's turn opening. Whatever
    the template does wrong (an error of its own, a sandbox refusal, past RENDER_SECONDS,
    RENDER_MEMORY or MAX_RENDERED) is one InputError."""

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    environment = BoundedSandbox(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = lambda fmt: datetime.now().strftime(str(fmt)[:100])
    try:
        with render_limits():
            pieces, size = [], 0
            stream = environment.from_string(template).generate(
                messages=[{"role": "user", "content": prompt}],
                add_generation_prompt=True,
                **specials,
            )
            for piece in stream:
                size += len(piece)
                if size > MAX_RENDERED:
                    raise TemplateLimit(f"it writes more than {MAX_RENDERED:,} characters")
                pieces.append(piece)
            return "".join(pieces)
    except TemplateError as exc:
        raise chat_error(f"the chat template failed ({exc})") from None
    except TemplateLimit as exc:
        raise chat_error(f"the chat template was stopped: {exc}") from None
    except MemoryError:
        raise chat_error(
            f"the chat template was stopped: it needs more than {RENDER_MEMORY >> 20} MB to "
            "render"
        ) from None
    except RecursionError:
        raise chat_error("the chat template failed (it calls itself without end)") from None
    except Exception as exc:  # its own defect (1 + 'a', 1 / 0): the model folder's, not cdd's
        problem = " ".join(f"{type(exc).__name__}: {exc}".split())[:160]
        raise chat_error(f"the chat template failed ({problem})") from None


@contextlib.contextmanager
def render_limits() -> Iterator[None]:
    """Within: TemplateLimit past RENDER_SECONDS (checked at each line of Python the template
    runs, through the tracing hook, the previous tracer restored after), and MemoryError
    past RENDER_MEMORY more address space (where the platform has resource limits)."""
    deadline = time.monotonic() + RENDER_SECONDS
    previous = sys.gettrace()

    def trace(frame, event: str, arg):
        if time.monotonic() > deadline:
            raise TemplateLimit(f"it took more than {RENDER_SECONDS:g} s to render")
        return trace

    limits = _address_space_limit()
    sys.settrace(trace)
    try:
        yield
    finally:
        sys.settrace(previous)
        if limits is not None:
            resource.setrlimit(resource.RLIMIT_AS, limits)


def _address_space_limit() -> tuple[int, int] | None:
    """Lower the soft limit on the address space to its use now plus RENDER_MEMORY; the
    limits before, to restore (None: not lowered, on a platform without them)."""
    if resource is None:
        return None
    try:
        with open("/proc/self/statm") as f:  # Linux: the address space's size in pages
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = used + RENDER_MEMORY
        if soft != resource.RLIM_INFINITY:
            limit = min(limit, soft)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError):
        return None
    return soft, hard
