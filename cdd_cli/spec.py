"""YAML constraint specs: load, validate with file/line/key in every error, resolve defaults.

    model: default-molecules
    constraints:
      - type: sa
        tau: 3.5
    projection: {eta: 1.0, inner_iters: 100, ...}
    sampling: {steps: 32, batch_size: 256, seed: 0, n: 1024}
    method: cdd

Flags given on the command line override the file. Everything is checked before any sampling.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, get_args, get_type_hints

import yaml

from cdd_cli.constraints import table
from cdd_cli.constraints.descriptor import ConstraintSpec, Descriptor  # an entry, and its type
from cdd_cli.constraints.table import plugin_of  # noqa: F401 (the plugin of a type name)
from cdd_cli.constraints.word_rules import SCHEMES
from cdd_cli.diffusion.processes import SAMPLERS
from cdd_cli.errors import InputError
from cdd_cli.methods import METHODS
from cdd_cli.models.registry import SHIPPED
from cdd_cli.output.config import yaml_values
from cdd_cli.settings import (
    DECODINGS,
    DTYPE_NAMES,
    MAX_LOOKAHEAD,
    MAX_SEED,
    MAX_STEPS,
    ALMSettings,
    RejectSettings,
    RepairSettings,
    SamplingSettings,
    SearchSettings,
)
from cdd_cli.suggest import did_you_mean

# A spec file's top-level keys, in the order an unknown key's message lists them.
SPEC_KEYS = (
    "model", "method", "words", "constraints", "projection", "search", "repair", "reject",
    "sampling",
)  # fmt: skip
# The sampling settings a flag names from a few choices.
FLAG_CHOICES = {"decode": DECODINGS, "sampler": SAMPLERS, "dtype": DTYPE_NAMES}


@dataclass
class Spec:
    model: str | None = None
    constraints: list[ConstraintSpec] = field(default_factory=list)
    projection: ALMSettings = field(default_factory=ALMSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    repair: RepairSettings = field(default_factory=RepairSettings)
    reject: RejectSettings = field(default_factory=RejectSettings)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    method: str = "cdd"
    # The word rules every lexical constraint is judged and laid out by: "plain" (whitespace
    # words, DESIGN.md §5) or "collie" (the COLLIE benchmark's NLTK-style words and sentences).
    words: str = "plain"
    source: str = "command line"

    def resolved(self) -> dict:
        """The configuration actually used, as plain data (written beside output files).
        Folders named relative to the current directory are written absolute, so that the
        file means the same wherever it is used from."""
        constraints = [{"type": c.type, **c.options} for c in self.constraints]
        for c in constraints:
            for key, value in option_defaults(c["type"]).items():
                c.setdefault(key, value)
            if "surrogate" in c:
                c["surrogate"] = absolute_folder(c["surrogate"])
            if c.get("reference") not in (None, "training", "all"):
                c["reference"] = str(Path(c["reference"]).expanduser().resolve())
            if isinstance(c.get("schema"), str):  # a .json file's path
                c["schema"] = str(Path(c["schema"]).expanduser().resolve())
        return {
            "model": absolute_folder(self.model),
            "method": self.method,
            "words": self.words,
            "constraints": constraints,
            "projection": asdict(self.projection),
            "search": asdict(self.search),
            "repair": asdict(self.repair),
            "reject": asdict(self.reject),
            "sampling": asdict(self.sampling),
        }


def absolute_folder(name: str | None) -> str | None:
    """A local folder's absolute path; a shipped model's or a hub id's name as it is."""
    if name is None or name in SHIPPED or not Path(name).expanduser().is_dir():
        return name
    return str(Path(name).expanduser().resolve())


SAMPLING_RANGES = {  # others: positive
    "steps": (1, MAX_STEPS),
    "seed": (0, MAX_SEED),
    "block_length": (0, MAX_STEPS),
}
FLOAT32_MAX = 3.4028234663852886e38  # settings become float32 tensors
NULL_TAG = "tag:yaml.org,2002:null"

Keys = dict[str, tuple[tuple[type, ...], bool]]


def keys_of(name: str, where: str) -> Keys:
    """The keys a constraint of type `name` takes -> (types, required); InputError naming the
    available types when no built-in or plugin has that name."""
    return {k: (key.types, key.required) for k, key in table.lookup(name, where).keys.items()}


def domain_of(name: str) -> str:
    """ "text", "molecules" (or "any"): what a constraint of type `name` judges; an unknown
    type: "molecules" (its validation names it unknown)."""
    found = table.descriptor_of(name)
    return "molecules" if found is None else found.domain


def takes_tau(name: str) -> bool:
    """Whether a --constraint of type `name` needs a --tau (an unknown type asks for one like
    most do: its validation then names it unknown)."""
    found = table.descriptor_of(name)
    return True if found is None else found.needs_tau


def tau_is_optional(name: str) -> bool:
    """Whether a --constraint of type `name` may be given a --tau it does not need (its tau
    has a default: a plugin's `tau_default`)."""
    found = table.descriptor_of(name)
    return found is not None and not found.needs_tau and found.tau_flag in found.keys


def tau_range(name: str) -> tuple[float, float] | None:
    found = table.descriptor_of(name)
    return None if found is None else found.tau_range


def option_defaults(name: str) -> dict[str, Any]:
    """The options an entry of type `name` takes when it leaves them out."""
    found = table.descriptor_of(name)
    return {} if found is None else dict(found.defaults)


class _Located:
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


def _check_type(
    loc: _Located, node: yaml.Node, key: str, value: Any, types: tuple[type, ...]
) -> Any:
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        names = "number" if float in types else " or ".join(t.__name__ for t in types)
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
        raise InputError(f"{loc.where(node)}: key '{key}': expected {names}, got {value!r}{hint}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{loc.where(node)}: key '{key}': must be a finite number, got {value}")
    if isinstance(value, (int, float)) and abs(value) > FLOAT32_MAX:
        # An integer this large has no float (`:g` of it raises), and 4,300 digits and more
        # have no text either: named by its size.
        shown = f"{value:g}" if isinstance(value, float) else f"a {value.bit_length()}-bit integer"
        raise InputError(f"{loc.where(node)}: key '{key}': {shown} is beyond float32's range")
    return value


def _settings(loc: _Located, node: yaml.Node, key: str, cls: type) -> Any:
    if isinstance(node, yaml.ScalarNode) and node.tag == NULL_TAG:
        return cls()  # a section with every key commented out: all defaults
    values = {}
    known = {f.name: f for f in fields(cls)}
    hints = get_type_hints(cls)
    for name, (k, v) in loc.mapping(node, key).items():
        if name not in known:
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
        values[name] = _check_type(loc, v, f"{key}.{name}", value, types)
        if float in types:  # `mu_init: 16` is a float setting (an int made integer tensors)
            values[name] = float(value)
    return cls(**values)


def check_constraint(c: ConstraintSpec) -> None:
    """Validation shared by spec files, --constraint flags and the API's values (the values'
    types are checked where they are read): required keys, tau's range, each key's allowed
    values, then the type's own check."""
    described = table.lookup(c.type, c.where)
    for name, key in described.keys.items():
        if key.required and name not in c.options:
            # A flag's or an API call's place names the type already: named once.
            named = c.where.startswith(("--constraint", "constraint "))
            what = "" if named else f"constraint '{c.type}' "
            raise InputError(f"{c.where}: {what}needs '{name}'")
    bounds = described.tau_range
    if bounds is not None and c.tau is not None:
        low, high = bounds
        if not low <= c.tau <= high:
            raise InputError(
                f"{c.where}: key 'tau': {c.tau} is outside [{low:g}, {high:g}] for '{c.type}'"
            )
    check_allowed_values(c, described)
    if described.check is not None:
        described.check(c)
    if c.options.get("margin", 0) < 0:
        raise InputError(f"{c.where}: key 'margin' must be >= 0")


def check_allowed_values(c: ConstraintSpec, described: Descriptor) -> None:
    """Each given value inside its key's range and among its choices."""
    for name, key in described.keys.items():
        if name not in c.options:
            continue
        value = c.options[name]
        if key.range is not None and not key.range[0] <= value <= key.range[1]:
            low, high = key.range
            within = f"[{low:g}, {high:g}]" if high < math.inf else f">= {low:g}"
            raise InputError(
                f"{c.where}: key '{name}': {value:g} is outside {within} for '{c.type}'"
            )
        if key.choices is not None and value not in key.choices:
            raise InputError(
                f"{c.where}: key '{name}' must be one of {', '.join(key.choices)}"
                f"{did_you_mean(value, key.choices)}"
            )


def check_together(constraints: list[ConstraintSpec], words: str) -> None:
    """Contradictions between a spec's entries (each type's `check_together`, once)."""
    hooks = []
    for c in constraints:
        hook = table.lookup(c.type, c.where).check_together
        if hook is not None and hook not in hooks:
            hooks.append(hook)
    for hook in hooks:
        hook(constraints, words)


def _constraint(loc: _Located, node: yaml.Node, index: int) -> ConstraintSpec:
    items = loc.mapping(node, f"constraints[{index}]")
    if "type" not in items:
        raise InputError(f"{loc.where(node)}: constraints[{index}] needs a 'type'")
    kind = loc.value(items["type"][1])
    spec = ConstraintSpec(str(kind), {}, loc.where(items["type"][1]))
    keys = keys_of(spec.type, spec.where)
    for name, (k, v) in items.items():
        if name == "type":
            continue
        if name not in keys:
            raise InputError(
                f"{loc.where(k)}: unknown key '{name}' for constraint '{spec.type}'"
                f"{did_you_mean(name, keys)} (known: {', '.join(['type', *keys])})"
            )
        elif (value := loc.value(v)) is None and not keys[name][1]:
            continue  # `key: null` (or `key:`) for an optional key: as if not written
        else:
            spec.options[name] = _check_type(loc, v, name, value, keys[name][0])
            if name == "surrogate" and not spec.options[name].strip():
                raise InputError(f"{loc.where(v)}: key 'surrogate' is empty")
            if name == "surrogate" and not Path(spec.options[name]).expanduser().is_dir():
                raise InputError(f"{loc.where(v)}: surrogate folder {spec.options[name]} not found")
    check_constraint(spec)
    return spec


# Limits on a spec, each far past any spec written by hand, so that a generated or hostile
# one is refused in a second rather than held for minutes: its file's size; the values it
# stands for, YAML aliases expanded (`&a [*b, *b, ...]` doubles at each level); its entries.
MAX_SPEC_BYTES = 256 << 10
MAX_SPEC_VALUES = 100_000
MAX_CONSTRAINTS = 1_000


def check_count(count: int, where: str) -> None:
    """A spec's (or an API call's) number of constraint entries, within MAX_CONSTRAINTS."""
    if count > MAX_CONSTRAINTS:
        raise InputError(
            f"{where}: {count:,} constraints; at most {MAX_CONSTRAINTS:,} (each is judged "
            "at every step of every sample)"
        )


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


def load_spec(path: Path) -> Spec:
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
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{where}{line}: YAML syntax error: {problem}") from None
    spec = Spec(source=where)
    if root is None:
        return spec
    check_expanded_size(root, where)
    loc = _Located(where)
    for name, (k, v) in loc.mapping(root, "").items():
        if name == "model":
            spec.model = _check_type(loc, v, "model", loc.value(v), (str,))
            if not spec.model.strip():
                raise InputError(f"{loc.where(v)}: key 'model' is empty")
        elif name in ("method", "words"):  # one of a few names
            value = _check_type(loc, v, name, loc.value(v), (str,))
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
            spec.constraints = [_constraint(loc, item, i) for i, item in enumerate(v.value)]
        elif name == "projection":
            spec.projection = _settings(loc, v, "projection", ALMSettings)
        elif name == "search":
            spec.search = _settings(loc, v, "search", SearchSettings)
        elif name == "repair":
            spec.repair = _settings(loc, v, "repair", RepairSettings)
        elif name == "reject":
            spec.reject = _settings(loc, v, "reject", RejectSettings)
        elif name == "sampling":
            spec.sampling = _settings(loc, v, "sampling", SamplingSettings)
        else:
            raise InputError(
                f"{loc.where(k)}: unknown key '{name}'{did_you_mean(name, SPEC_KEYS)} "
                f"(known: {', '.join(SPEC_KEYS)})"
            )
    check_settings(spec, where)
    return spec


MAX_SAMPLES = 10**12  # samples a run (or a batch) may ask for


def finite(value: float) -> bool:
    """A finite number, an integer too large for a float counting as not."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_settings(spec: Spec, where: str) -> None:
    p, search = spec.projection, spec.search

    def given(value: Any, ok: bool) -> bool:  # None: left to the method and model
        return value is None or ok

    mu_top = p.mu_max if p.mu_max is not None else math.inf
    rules = [
        (given(p.eta, p.eta is not None and p.eta > 0), "projection.eta must be > 0"),
        (given(p.inner_iters, (p.inner_iters or 0) >= 1), "projection.inner_iters must be >= 1"),
        (
            given(p.max_outer_iters, (p.max_outer_iters or 0) >= 1),
            "projection.max_outer_iters must be >= 1",
        ),
        (given(p.mu_max, (p.mu_max or 0) > 0), "projection.mu_max must be > 0"),
        (
            given(p.mu_init, 0 < (p.mu_init or 0) <= mu_top),
            "projection needs 0 < mu_init <= mu_max",
        ),
        (given(p.alpha, (p.alpha or 0) >= 1), "projection.alpha must be >= 1"),
        (given(p.patience, (p.patience or 0) >= 1), "projection.patience must be >= 1"),
        (given(p.temperature, (p.temperature or 0) > 0), "projection.temperature must be > 0"),
        (
            given(p.project_from, 0 <= (p.project_from or 0) <= 1),
            "projection.project_from must be in [0, 1]",
        ),
        (
            # One token a position could move no mass: the ALM would iterate for nothing.
            given(p.support, (p.support or 0) == 0 or (p.support or 0) >= 2),
            "projection.support must be 0 (the whole vocabulary) or >= 2",
        ),
        (
            0 <= p.lookahead <= MAX_LOOKAHEAD,
            f"projection.lookahead must be in [0, {MAX_LOOKAHEAD}]",
        ),
        (search.top_k >= 1, "search.top_k must be >= 1"),
        (given(search.max_nodes, (search.max_nodes or 0) >= 1), "search.max_nodes must be >= 1"),
        (
            given(search.project_from, 0 <= (search.project_from or 0) <= 1),
            "search.project_from must be in [0, 1]",
        ),
        (
            given(spec.repair.max_redraws, (spec.repair.max_redraws or 0) >= 0),
            "repair.max_redraws must be >= 0",
        ),
        (spec.repair.margin_step >= 0, "repair.margin_step must be >= 0"),
        (
            given(spec.repair.surrogates_from, (spec.repair.surrogates_from or 0) >= 1),
            "repair.surrogates_from must be >= 1",
        ),
        (spec.reject.max_attempts >= 1, "reject.max_attempts must be >= 1"),
        (spec.sampling.batch_size >= 1, "sampling.batch_size must be >= 1"),
        (
            spec.sampling.steps is None or 1 <= spec.sampling.steps <= MAX_STEPS,
            f"sampling.steps must be in [1, {MAX_STEPS:,}]",
        ),
        (0 <= spec.sampling.seed <= MAX_SEED, f"sampling.seed must be in [0, {MAX_SEED}]"),
        (spec.sampling.n is None or spec.sampling.n >= 1, "sampling.n must be >= 1"),
        # Counts past these have no use, and overflow what indexes samples (a C integer).
        (
            spec.sampling.n is None or spec.sampling.n <= MAX_SAMPLES,
            f"sampling.n must be at most {MAX_SAMPLES:,}",
        ),
        (
            spec.sampling.batch_size <= MAX_SAMPLES,
            f"sampling.batch_size must be at most {MAX_SAMPLES:,}",
        ),
        (
            spec.sampling.decode in (None, *DECODINGS),
            f"sampling.decode must be one of {', '.join(DECODINGS)}, got {spec.sampling.decode!r}"
            f"{did_you_mean(spec.sampling.decode, DECODINGS)}",
        ),
        (
            spec.sampling.sampler in (None, *SAMPLERS),
            f"sampling.sampler must be one of {', '.join(SAMPLERS)}, got {spec.sampling.sampler!r}"
            f"{did_you_mean(spec.sampling.sampler, SAMPLERS)}",
        ),
        (
            spec.sampling.block_length is None or spec.sampling.block_length >= 0,
            "sampling.block_length must be >= 0 (0: one block)",
        ),
        (
            finite(spec.sampling.temperature) and 0 < spec.sampling.temperature <= 100,
            f"sampling.temperature must be in (0, 100], got {spec.sampling.temperature}",
        ),
        (
            spec.sampling.top_p is None or 0 < spec.sampling.top_p <= 1,
            f"sampling.top_p must be in (0, 1], got {spec.sampling.top_p}",
        ),
        (
            spec.sampling.dtype in (None, *DTYPE_NAMES),
            f"sampling.dtype must be one of {', '.join(DTYPE_NAMES)}, got {spec.sampling.dtype!r}"
            f"{did_you_mean(spec.sampling.dtype, DTYPE_NAMES)}",
        ),
    ]
    for ok, message in rules:
        if not ok:
            raise InputError(f"{where}: {message}")
    if spec.words not in SCHEMES:
        raise InputError(
            f"{where}: words must be one of {', '.join(SCHEMES)}, got {spec.words!r}"
            f"{did_you_mean(spec.words, SCHEMES)}"
        )
    check_count(len(spec.constraints), where)
    check_together(spec.constraints, spec.words)
    seen: dict[str, str] = {}
    for c in spec.constraints:
        key = repr((c.type, sorted(c.options.items())))
        if key in seen:
            raise InputError(f"{c.where}: repeats the constraint at {seen[key]}")
        seen[key] = c.where


def overlay(
    spec: Spec,
    constraints: list[ConstraintSpec],
    model: str | None = None,
    method: str | None = None,
    sampling: dict[str, int | None] | None = None,
    flags: bool = False,
    words: str | None = None,
    **choices: str | float | None,
) -> Spec:
    """`spec` with what a command line or an API call gives laid over it, fully validated:
    a constraint of a type the spec has replaces its entries; a value given (not None)
    replaces the spec's. `flags`: name problems as flags (--batch-size) rather than keys.
    `words`: the word rules of lexical constraints. `choices`: other sampling settings by
    name (decode, sampler, dtype, temperature, top_p), checked with the rest."""
    spec.constraints = [c for c in spec.constraints if c.type not in {g.type for g in constraints}]
    spec.constraints += constraints
    if method is not None:
        name = "--method" if flags else "method"
        if method not in METHODS:
            raise InputError(
                f"{name} must be one of {', '.join(METHODS)}, got {method!r}"
                f"{did_you_mean(method, METHODS)}"
            )
        given = [f.name for f in fields(spec.projection)]
        unset = ALMSettings()  # None: the method's value; lookahead 0: off under every method
        written = [k for k in given if getattr(spec.projection, k) != getattr(unset, k)]
        written += ["search.project_from"] if spec.search.project_from is not None else []
        if method != spec.method and written and method in ("cdd", "paper"):
            # A written configuration holds the other method's values: they would run silently.
            raise InputError(
                f"{name} {method}: {spec.source} is a '{spec.method}' spec that sets "
                f"{', '.join(written[:3])}{'...' if len(written) > 3 else ''}; change its "
                "method: there, or remove those settings to take the method's own"
            )
        spec.method = method
    for name, value in (sampling or {}).items():
        if value is not None:
            flag = ("-n" if name == "n" else "--" + name.replace("_", "-")) if flags else name
            if isinstance(value, bool) or not isinstance(value, int):  # an API caller's value
                raise InputError(f"{flag} must be an integer, got {value!r}")
            low, high = SAMPLING_RANGES.get(name, (1, None))
            if value < low or (high is not None and value > high):
                within = f"in [{low}, {high:,}]" if high is not None else "positive"
                raise InputError(f"{flag} must be {within}, got {value}")
            setattr(spec.sampling, name, value)
    for name, value in choices.items():
        if value is not None:
            number = name in ("temperature", "top_p")
            kind = (int, float) if number else str
            if isinstance(value, bool) or not isinstance(value, kind):
                flag = "--" + name.replace("_", "-") if flags else name
                raise InputError(
                    f"{flag} must be a {'number' if number else 'name'}, got {value!r}"
                )
            allowed = FLAG_CHOICES.get(name)
            if flags and allowed is not None and value not in allowed:
                # Named as the flag: the settings' check below would blame the spec file.
                raise InputError(
                    f"--{name} must be one of {', '.join(allowed)}, got {value!r}"
                    f"{did_you_mean(value, allowed)}"
                )
            setattr(spec.sampling, name, value)
    if words is not None and not isinstance(words, str):
        raise InputError(f"words must be a name, got {words!r}")
    spec.words = words or spec.words
    if model is not None and not isinstance(model, str):
        raise InputError(f"model must be a name or a folder, got {model!r}")
    if model is not None and not model.strip():
        raise InputError(f"{'--model' if flags else 'model'} is empty")
    spec.model = model or spec.model
    check_settings(spec, spec.source)
    return spec


def constraint_from_flags(name: str, tau: float | None) -> ConstraintSpec:
    """The entry `--constraint NAME [--tau TAU]` gives: TAU is the type's `tau_flag` option
    (a property's natural bound: qed's min, mw's max)."""
    described = table.lookup(name, f"--constraint {name}")
    if described.spec_only:
        keys = ", ".join(described.keys)
        raise InputError(
            f"--constraint {name}: its options ({keys}) are given in a spec file: use --spec "
            "FILE (`cdd constraints ls` lists the keys)"
        )
    options = {} if tau is None else {described.tau_flag: tau}
    spec = ConstraintSpec(name, options, f"--constraint {name}")
    check_constraint(spec)
    return spec


def dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def constraint_rows() -> list[dict]:
    """One row per constraint type, built in or a plugin's (a broken plugin: why): what
    `cdd constraints ls` prints."""
    rows = []
    for found in table.listing():
        if not isinstance(found, Descriptor):
            rows.append({"type": found.name, "source": found.package, "broken": found.problem})
            continue
        bounds = found.tau_range
        bounded = bounds is not None and bounds != (-math.inf, math.inf)
        rows.append(
            {
                "type": found.name,
                "domain": found.domain,
                "keys": {k: {"required": key.required} for k, key in found.keys.items()},
                "tau_range": list(bounds) if bounded else None,
                "source": found.source,
                "description": found.description,
            }
        )
    return rows
