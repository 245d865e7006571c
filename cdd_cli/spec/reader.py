"""A spec file read: YAML composed with every key's place kept, so that each error names
FILE:LINE and the key; within limits on the file's size, the values its aliases stand for
and its entries. Everything is checked before any sampling."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_type_hints

import yaml

from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.lexical import SCHEMES
from cdd_cli.errors import InputError
from cdd_cli.methods import METHODS
from cdd_cli.output.config import yaml_values
from cdd_cli.spec.entries import BLANK_KEY, check_constraint, check_count, keys_of
from cdd_cli.spec.model import Spec, check_settings, sections
from cdd_cli.spec.values import check_value
from cdd_cli.suggest import did_you_mean

# A spec file's top-level keys, in the order an unknown key's message lists them.
SPEC_KEYS = (
    "model", "method", "words", "constraints", "projection", "search", "repair", "reject",
    "sampling",
)  # fmt: skip
NULL_TAG = "tag:yaml.org,2002:null"

# Limits on a spec, each far past any spec written by hand, so that a generated or hostile
# one is refused in a second rather than held for minutes: its file's size; the values it
# stands for, YAML aliases expanded (`&a [*b, *b, ...]` doubles at each level). (Its
# entries: `entries.MAX_CONSTRAINTS`.)
MAX_SPEC_BYTES = 256 << 10
MAX_SPEC_VALUES = 100_000


class Located:
    """A YAML node turned into Python values while remembering where each key was written."""

    def __init__(self, path: str):
        self.path = path

    def where(self, node: yaml.Node) -> str:
        return f"{self.path}:{node.start_mark.line + 1}"

    def value(self, node: yaml.Node) -> Any:
        # An empty value (`margin:`) is null; serialised alone it would be no document at all.
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == NULL_TAG):
            return None
        try:
            return yaml.safe_load(yaml.serialize(node))
        # A tag (`tau: !foo 3.5`); an integer of more digits than Python reads (ValueError).
        except (yaml.YAMLError, RecursionError, ValueError) as exc:
            problem = getattr(exc, "problem", None) or type(exc).__name__
            if isinstance(exc, ValueError):
                problem = "a number of more digits than any setting takes"
            raise InputError(f"{self.where(node)}: cannot read this value ({problem})") from None

    def mapping(self, node: yaml.Node, key: str) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise InputError(f"{self.where(node)}: {key or 'the spec'} must be a mapping")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for k, v in node.value:
            name = self.value(k)
            if not isinstance(name, str):
                raise InputError(f"{self.where(k)}: keys must be names, got {name!r}")
            if name in out:
                raise InputError(
                    f"{self.where(k)}: key '{key + '.' if key else ''}{name}' given twice"
                )
            out[name] = (k, v)
        return out


def check_type(
    loc: Located, node: yaml.Node, key: str, value: Any, types: tuple[type, ...]
) -> Any:
    """`value`, read at `node`, when it is of `types` (`values.check_value`), with a hint for
    a number YAML read as text."""
    hint = ""
    if isinstance(value, str) and float in types:
        try:
            float(value)
            quoted = isinstance(node, yaml.ScalarNode) and node.style in ("'", '"')
            hint = (
                " (a quoted string: remove the quotes)"
                if quoted
                else " (YAML reads 1e3 as text: write 1.0e+3)"
            )
        except ValueError:
            pass
    return check_value(loc.where(node), f"key '{key}'", value, types, hint)


def read_settings(loc: Located, node: yaml.Node, key: str, cls: type) -> Any:
    """A settings section (`cls`, a dataclass of `settings.py`): known keys, each of its
    field's type; their allowed values are checked with the whole spec (`check_settings`)."""
    if isinstance(node, yaml.ScalarNode) and node.tag == NULL_TAG:
        return cls()  # a section with every key commented out: all defaults
    values = {}
    hints = get_type_hints(cls)
    known = list(hints)
    for name, (k, v) in loc.mapping(node, key).items():
        if name not in hints:
            raise InputError(
                f"{loc.where(k)}: unknown key '{key}.{name}'"
                f"{did_you_mean(name, known, prefix=f'{key}.')} "
                f"(known: {', '.join(known)})"
            )
        hint = get_args(hints[name]) or (hints[name],)  # int, float or str, some None-able
        kinds = ((float, (int, float)), (str, (str,)), (bool, (bool,)))
        types = next((t for kind, t in kinds if kind in hint), (int,))
        value = loc.value(v)
        if getattr(cls(), name) is None and value is None:  # null: left to the model
            values[name] = None
            continue
        values[name] = check_type(loc, v, f"{key}.{name}", value, types)
        if float in types:  # `mu_init: 16` is a float setting (an int made integer tensors)
            values[name] = float(value)
    return cls(**values)


def read_constraint(loc: Located, node: yaml.Node, index: int) -> ConstraintSpec:
    items = loc.mapping(node, f"constraints[{index}]")
    if "type" not in items:
        raise InputError(f"{loc.where(node)}: constraints[{index}] needs a 'type'")
    kind = loc.value(items["type"][1])
    spec = ConstraintSpec(str(kind), {}, loc.where(items["type"][1]))
    keys = keys_of(spec.type, spec.where)
    for name, (k, v) in items.items():
        if name == "type":
            continue
        if name == BLANK_KEY:
            blank = loc.value(v)
            if isinstance(blank, bool) or not isinstance(blank, (str, int)) or not str(blank):
                raise InputError(f"{loc.where(v)}: key 'blank' names a template blank (a name "
                                 "or a number)")  # fmt: skip
            spec.options[name] = str(blank)
        elif name not in keys:
            raise InputError(
                f"{loc.where(k)}: unknown key '{name}' for constraint '{spec.type}'"
                f"{did_you_mean(name, keys)} (known: {', '.join(['type', *keys])})"
            )
        elif (value := loc.value(v)) is None and not keys[name][1]:
            continue  # `key: null` (or `key:`) for an optional key: as if not written
        else:
            spec.options[name] = check_type(loc, v, name, value, keys[name][0])
            if name == "surrogate" and not spec.options[name].strip():
                raise InputError(f"{loc.where(v)}: key 'surrogate' is empty")
            if name == "surrogate" and not Path(spec.options[name]).expanduser().is_dir():
                raise InputError(f"{loc.where(v)}: surrogate folder {spec.options[name]} not found")
    check_constraint(spec)
    return spec


def check_expanded_size(root: yaml.Node, where: str) -> None:
    """The values the YAML document stands for once its aliases are expanded (each level of a
    nest of aliases multiplies them) within MAX_SPEC_VALUES, counted without expanding."""
    try:
        count = yaml_values(root, MAX_SPEC_VALUES)
    except RecursionError:
        raise InputError(f"{where}: nested too deeply to read") from None
    if count > MAX_SPEC_VALUES:
        raise InputError(
            f"{where}: stands for more than {MAX_SPEC_VALUES:,} values once its YAML aliases "
            "are expanded; write the spec without them"
        )


def compose(path: Path) -> yaml.Node | None:
    """The spec file's YAML document, composed (None: an empty file), within MAX_SPEC_BYTES."""
    where = str(path)
    if Path(path).exists() and not Path(path).is_file():  # a folder, or a pipe that would block
        raise InputError(f"{where}: not a regular file")
    try:
        with Path(path).open("rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"{where}: no such spec file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: cannot read spec ({exc})") from None
    if len(data) > MAX_SPEC_BYTES:
        # The YAML reader is pure Python (about 100 kB a second): a bigger file is no spec
        # anyone wrote, and would hold the command for minutes.
        raise InputError(
            f"{where}: larger than {MAX_SPEC_BYTES >> 10} KiB, the most a spec file may be (a "
            "large JSON schema goes in a .json file of its own)"
        )
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{where}{line}: YAML syntax error: {problem}") from None


def load_spec(path: Path) -> Spec:
    """The spec file at `path`, read and checked whole (InputError naming FILE:LINE)."""
    where = str(path)
    root = compose(path)
    spec = Spec(source=where)
    if root is None:
        return spec
    check_expanded_size(root, where)
    loc = Located(where)
    settings = {name: type(getattr(spec, name)) for name in sections(spec)}
    for name, (k, v) in loc.mapping(root, "").items():
        if name == "model":
            spec.model = check_type(loc, v, "model", loc.value(v), (str,))
            if not spec.model.strip():
                raise InputError(f"{loc.where(v)}: key 'model' is empty")
        elif name in ("method", "words"):  # one of a few names
            value = check_type(loc, v, name, loc.value(v), (str,))
            choices = METHODS if name == "method" else SCHEMES
            if value not in choices:
                raise InputError(
                    f"{loc.where(v)}: key '{name}': {value!r} is not one of {', '.join(choices)}"
                    f"{did_you_mean(value, choices)}"
                )
            setattr(spec, name, value)
        elif name == "constraints":
            if not isinstance(v, yaml.SequenceNode):
                raise InputError(f"{loc.where(v)}: key 'constraints' must be a list")
            check_count(len(v.value), loc.where(v))
            spec.constraints = [read_constraint(loc, item, i) for i, item in enumerate(v.value)]
        elif name in settings:
            setattr(spec, name, read_settings(loc, v, name, settings[name]))
        else:
            raise InputError(
                f"{loc.where(k)}: unknown key '{name}'{did_you_mean(name, SPEC_KEYS)} "
                f"(known: {', '.join(SPEC_KEYS)})"
            )
    check_settings(spec, where)
    return spec
