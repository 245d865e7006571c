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

from cdd_cli import plugins
from cdd_cli.diffusion.processes import SAMPLERS
from cdd_cli.errors import InputError
from cdd_cli.evaluate.lexical import SCHEMES
from cdd_cli.evaluate.properties import PROPERTIES, smarts_pattern
from cdd_cli.plugins import ConstraintPlugin
from cdd_cli.settings import (
    DECODINGS,
    DTYPE_NAMES,
    MAX_SEED,
    MAX_STEPS,
    METHODS,
    ALMSettings,
    RejectSettings,
    RepairSettings,
    SamplingSettings,
    SearchSettings,
)


@dataclass
class ConstraintSpec:
    type: str
    options: dict[str, Any]
    where: str  # "FILE:LINE" or "--constraint"

    @property
    def tau(self) -> float | None:
        return self.options.get("tau")


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
    from cdd_cli.models.registry import SHIPPED

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

# Per constraint type: allowed keys -> (python types, required). tau ranges live in RANGES.
CONSTRAINT_KEYS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "sa": {
        "tau": ((int, float), True),
        "surrogate": ((str,), False),
        "margin": ((int, float), False),
    },
    "novelty": {
        # What "known" means: the model's training molecules, those and its held-out ones
        # (`all`), or a SMILES file of the user's own library.
        "reference": ((str,), False),
    },
    **{name: {} for name in PROPERTIES},  # filled below from the property table
    "substructure": {"smarts": ((str,), True), "present": ((bool,), False)},
    "lipinski": {"max_violations": ((int,), False)},
    "pains": {},
    "toxicity": {
        "tau": ((int, float), True),
        "surrogate": ((str,), False),
        "margin": ((int, float), False),
        # What is judged: the continuation alone (default: a fixed toxic prompt cannot make
        # the constraint infeasible) or the prompt and continuation as the reader sees them.
        "scope": ((str,), False),
    },
    # Lexical constraints on the continuation's words (DESIGN.md §5 word rules).
    "word_at": {"position": ((int,), True), "word": ((str,), True)},
    "include": {"words": ((list,), True)},
    "exclude": {"words": ((list,), True)},
    "word_count": {"min": ((int,), False), "max": ((int,), False), "equals": ((int,), False)},
    "sentence_count": {
        "min": ((int,), False),
        "max": ((int,), False),
        "equals": ((int,), False),
    },
    "count": {"letter": ((str,), False), "word": ((str,), False)},
    # Structured output: the whole continuation matches (structured.py).
    "regex": {"pattern": ((str,), True), "ignore_case": ((bool,), False)},
    "json_schema": {"schema": ((dict, str), True)},
}
for _name, _property in PROPERTIES.items():
    CONSTRAINT_KEYS[_name] = {
        **{bound: ((int, float), False) for bound in _property.bounds},
        "surrogate": ((str,), False),
        "margin": ((int, float), False),
        **({"weight": ((str,), False)} if _name == "mw" else {}),
        **({"aromatic": ((bool,), False)} if _name == "rings" else {}),
    }
DESCRIPTIONS = {
    "sa": "RDKit's synthetic accessibility score (1 easy .. 10 hard) at most tau",
    "novelty": "not in the reference (reference: training, all, or a SMILES file) nor earlier "
    "in the run (canonical SMILES)",
    **{name: p.description for name, p in PROPERTIES.items()},
    "substructure": "the SMARTS pattern present (present: false: absent)",
    "lipinski": "Lipinski's rule of five, at most max_violations (default 0) of its limits broken",
    "pains": "no PAINS alert (RDKit's FilterCatalog, families A-C)",
    "toxicity": "the shipped classifier's probability that the text is toxic at most tau",
    "word_at": "this word at this 1-based word position of the continuation",
    "include": "each of these words somewhere in the continuation",
    "exclude": "none of these words in the continuation",
    "word_count": "the continuation's number of words: min, max or equals",
    "sentence_count": "the continuation's number of sentences: min, max or equals",
    "count": "the first number written is how often a letter occurs in a word",
    "regex": "the whole continuation matches the pattern (Python re; ignore_case: true)",
    "json_schema": "the continuation is JSON valid under the schema (a mapping or .json file)",
}
SCOPES = ("continuation", "full")
LEXICAL_TYPES = ("word_at", "include", "exclude", "word_count", "sentence_count", "count")
STRUCTURED_TYPES = ("regex", "json_schema")
TEXT_TYPES = ("toxicity", *LEXICAL_TYPES, *STRUCTURED_TYPES)
RANGES = {"sa": (1.0, 10.0), "toxicity": (0.0, 1.0)}
# Options a constraint takes when a spec leaves them out (the resolved configuration shows
# them). margin: how far inside tau the surrogate aims, against its error (a probability
# for toxicity); scope: what the toxicity judge reads, the continuation or prompt and all.
OPTION_DEFAULTS: dict[str, dict[str, Any]] = {
    "sa": {"margin": 0.0},
    **{name: {"margin": 0.0} for name in PROPERTIES},
    "mw": {"weight": "average", "margin": 0.0},
    "rings": {"aromatic": False, "margin": 0.0},
    "substructure": {"present": True},
    "lipinski": {"max_violations": 0},
    "toxicity": {"margin": 0.05, "scope": "continuation"},
    "regex": {"ignore_case": False},
}
# Types whose options no flag can give (count reads its question from the prompt).
SPEC_ONLY = (
    "word_at",
    "include",
    "exclude",
    "word_count",
    "sentence_count",
    "substructure",
    *STRUCTURED_TYPES,
)
WEIGHTS = ("average", "exact")
BUILTIN = frozenset(CONSTRAINT_KEYS)
Keys = dict[str, tuple[tuple[type, ...], bool]]


def plugin_of(name: str) -> ConstraintPlugin | None:
    """The installed plugin of constraint type `name` (PluginError if it is broken), or None
    for a built-in or unknown type."""
    if name in BUILTIN:
        return None
    entry = plugins.find(name, BUILTIN)
    return None if entry is None else entry.usable()


def keys_of(name: str, where: str) -> Keys:
    """The keys a constraint of type `name` takes -> (types, required); InputError naming the
    available types when no built-in or plugin has that name."""
    if name in CONSTRAINT_KEYS:
        return CONSTRAINT_KEYS[name]
    plugin = plugin_of(name)
    if plugin is None:
        usable = [p.name for p in plugins.installed(BUILTIN) if p.plugin is not None]
        raise InputError(
            f"{where}: unknown constraint type '{name}' "
            f"(available: {', '.join([*CONSTRAINT_KEYS, *usable])})"
        )
    keys: Keys = {
        "tau": ((int, float), plugin.tau_default is None),
        "margin": ((int, float), False),
        # A surrogate trained on the plugin's judge (`cdd train surrogate`).
        "surrogate": ((str,), False),
    }
    keys.update({k: (o.types, o.required) for k, o in plugin.options.items()})
    return keys


def domain_of(name: str) -> str:
    """ "text" or "molecules": what a constraint of type `name` judges."""
    plugin = plugin_of(name)
    if plugin is not None:
        return plugin.domain
    return "text" if name in TEXT_TYPES else "molecules"


def takes_tau(name: str) -> bool:
    """Whether a --constraint of type `name` needs a --tau."""
    plugin = plugin_of(name)
    if plugin is not None:
        return plugin.tau_default is None
    return name in PROPERTIES or "tau" in CONSTRAINT_KEYS.get(name, {"tau": None})


def tau_range(name: str) -> tuple[float, float] | None:
    plugin = plugin_of(name)
    return plugin.tau_range if plugin is not None else RANGES.get(name)


def option_defaults(name: str) -> dict[str, Any]:
    """The options an entry of type `name` takes when it leaves them out."""
    plugin = plugin_of(name)
    if plugin is None:
        return OPTION_DEFAULTS.get(name, {})
    tau = {} if plugin.tau_default is None else {"tau": plugin.tau_default}
    return {**tau, "margin": 0.0}


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
        except (yaml.YAMLError, RecursionError) as exc:  # e.g. a tag: `tau: !foo 3.5`
            problem = getattr(exc, "problem", None) or type(exc).__name__
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
        raise InputError(f"{loc.where(node)}: key '{key}': {value:g} is beyond float32's range")
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
                f"{loc.where(k)}: unknown key '{key}.{name}' (known: {', '.join(known)})"
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
    """Validation shared by spec files and --constraint flags."""
    keys = keys_of(c.type, c.where)
    for name, (_, required) in keys.items():
        if required and name not in c.options:
            raise InputError(f"{c.where}: constraint '{c.type}' needs '{name}'")
    bounds = tau_range(c.type)
    if bounds is not None and c.tau is not None:
        low, high = bounds
        if not low <= c.tau <= high:
            raise InputError(
                f"{c.where}: key 'tau': {c.tau} is outside [{low:g}, {high:g}] for '{c.type}'"
            )
    check_lexical_options(c)
    check_structured_options(c)
    check_molecule_options(c)
    check_plugin_options(c)
    if c.options.get("scope", "continuation") not in SCOPES:
        raise InputError(f"{c.where}: key 'scope' must be one of {', '.join(SCOPES)}")
    if c.options.get("margin", 0) < 0:
        raise InputError(f"{c.where}: key 'margin' must be >= 0")


def check_plugin_options(c: ConstraintSpec) -> None:
    """A plugin's own check of an entry's values (it raises ValueError with the problem)."""
    plugin = plugin_of(c.type)
    if plugin is None or plugin.check is None:
        return
    try:
        plugin.check(dict(c.options))
    except ValueError as exc:
        raise InputError(f"{c.where}: constraint '{c.type}': {plugins.one_line(exc)}") from None
    except Exception as exc:
        package = plugins.find(c.type, BUILTIN).package
        raise plugins.PluginError(
            f"{c.where}: plugin '{c.type}' ({package}) failed checking its options "
            f"({type(exc).__name__}: {plugins.one_line(exc)})"
        ) from None


def check_molecule_options(c: ConstraintSpec) -> None:
    """A property entry's bounds (at least one, inside the property's domain, min <= max);
    a SMARTS RDKit reads; a rule-of-five allowance of 0-3 broken limits."""
    o = c.options
    if c.type in PROPERTIES:
        prop = PROPERTIES[c.type]
        given = {b: o[b] for b in prop.bounds if b in o}
        if not given:
            raise InputError(f"{c.where}: '{c.type}' needs {' or '.join(prop.bounds)}")
        low, high = prop.domain
        for bound, value in given.items():
            if not low <= value <= high:
                within = f"[{low:g}, {high:g}]" if high < math.inf else f">= {low:g}"
                raise InputError(
                    f"{c.where}: key '{bound}': {value:g} is outside {within} for '{c.type}'"
                )
        if given.get("min", -math.inf) > given.get("max", math.inf):
            raise InputError(f"{c.where}: min {given['min']:g} > max {given['max']:g}")
        if o.get("weight", "average") not in WEIGHTS:
            raise InputError(f"{c.where}: key 'weight' must be one of {', '.join(WEIGHTS)}")
    if c.type == "substructure" and smarts_pattern(o["smarts"]) is None:
        raise InputError(f"{c.where}: key 'smarts': RDKit cannot read {o['smarts']!r} as SMARTS")
    if c.type == "lipinski" and not 0 <= o.get("max_violations", 0) <= 3:
        raise InputError(f"{c.where}: key 'max_violations' must be in [0, 3] (4 allows anything)")
    if c.type == "novelty" and "reference" in o:
        reference = o["reference"]
        if reference not in ("training", "all") and not Path(reference).expanduser().is_file():
            raise InputError(
                f"{c.where}: key 'reference': {reference!r} is neither training, all nor a file"
            )


def check_lexical_options(c: ConstraintSpec) -> None:
    o = c.options
    if c.type == "word_at":
        if o["position"] == 0:
            raise InputError(f"{c.where}: key 'position': 1-based (negative from the end), not 0")
        if not o["word"].strip():
            raise InputError(f"{c.where}: key 'word' is empty")
    if c.type in ("include", "exclude"):
        words = o["words"]
        if not words or not all(isinstance(w, str) and w.strip() for w in words):
            raise InputError(f"{c.where}: key 'words' must be a list of non-empty words")
    if c.type in ("word_count", "sentence_count"):
        bounds = {k: o[k] for k in ("min", "max", "equals") if k in o}
        if not bounds:
            raise InputError(f"{c.where}: {c.type} needs min, max or equals")
        if any(v < 0 for v in bounds.values()):
            raise InputError(f"{c.where}: {c.type.replace('_', ' ')}s must be >= 0")
        if "equals" in bounds and len(bounds) > 1:
            raise InputError(f"{c.where}: give 'equals' alone, or 'min'/'max'")
        if bounds.get("min", 0) > bounds.get("max", bounds.get("min", 0)):
            raise InputError(f"{c.where}: min {bounds['min']} > max {bounds['max']}")
    if c.type == "count":
        if "letter" in o and len(o["letter"]) != 1:
            raise InputError(f"{c.where}: key 'letter' must be one character")
        if ("letter" in o) != ("word" in o):
            raise InputError(f"{c.where}: give both 'letter' and 'word', or neither (prompt)")
        if "word" in o and not o["word"].strip():
            raise InputError(f"{c.where}: key 'word' is empty")


def check_structured_options(c: ConstraintSpec) -> None:
    """A pattern Python's `re` reads; a schema that is one, in the supported subset."""
    if c.type == "regex":
        import re

        try:
            re.compile(c.options["pattern"])
        except re.error as exc:
            raise InputError(
                f"{c.where}: key 'pattern': not a regular expression ({exc})"
            ) from None
        if not c.options["pattern"]:
            raise InputError(f"{c.where}: key 'pattern' is empty")
    if c.type == "json_schema":
        from cdd_cli.evaluate.schema_regex import load_schema

        load_schema(c.options["schema"], c.where)


def check_lexical_together(constraints: list[ConstraintSpec], words: str = "plain") -> None:
    """Contradictions between lexical constraints, under the word rules `words`, that no model
    or length can resolve: a required or excluded word those rules read as several words
    (COLLIE reads "don't" as "do" and "n't": excluded, it would never be found), one word slot
    given two words, a word required and excluded."""
    from cdd_cli.evaluate.lexical import split_words, word_key

    required: dict[str, str] = {}
    forbidden: dict[str, str] = {}
    forbidden_as_given: dict[str, str] = {}
    positions: dict[int, tuple[str, str]] = {}
    for c in constraints:
        if c.type == "word_at":
            required[c.options["word"]] = c.where
            p, w = c.options["position"], c.options["word"]
            if p in positions and word_key(positions[p][0], words) != word_key(w, words):
                raise InputError(
                    f"{c.where}: word {p} cannot be {w!r}: {positions[p][1]} makes it "
                    f"{positions[p][0]!r}"
                )
            positions[p] = (w, c.where)
        if c.type == "include":
            required.update({w: c.where for w in c.options["words"]})
        if c.type == "exclude":
            forbidden.update({word_key(w, words): c.where for w in c.options["words"]})
            forbidden_as_given.update({w: c.where for w in c.options["words"]})
    # A word the rules read as several can be neither placed nor found as one word.
    for word, where in {**forbidden_as_given, **required}.items():
        read = split_words(word, words)
        if [word_key(w, words) for w in read] != [word_key(word, words)]:
            raise InputError(
                f"{where}: {word!r} is not one word under the {words} word rules (it reads "
                f"as {read!r})"
            )
        if word in required and word_key(word, words) in forbidden:
            raise InputError(
                f"{where}: {word!r} is required here but excluded at "
                f"{forbidden[word_key(word, words)]}"
            )


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
                f"{loc.where(k)}: unknown key '{name}' for constraint "
                f"'{spec.type}' (known: {', '.join(['type', *keys])})"
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


def load_spec(path: Path) -> Spec:
    where = str(path)
    if Path(path).exists() and not Path(path).is_file():  # a folder, or a pipe that would block
        raise InputError(f"{where}: not a regular file")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{where}: no such spec file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: cannot read spec ({exc})") from None
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
                )
            setattr(spec, name, value)
        elif name == "constraints":
            if not isinstance(v, yaml.SequenceNode):
                raise InputError(f"{loc.where(v)}: key 'constraints' must be a list")
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
                f"{loc.where(k)}: unknown key '{name}' (known: model, method, words, "
                "constraints, projection, search, repair, reject, sampling)"
            )
    check_settings(spec, where)
    return spec


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
        (spec.reject.max_attempts >= 1, "reject.max_attempts must be >= 1"),
        (spec.sampling.batch_size >= 1, "sampling.batch_size must be >= 1"),
        (
            spec.sampling.steps is None or 1 <= spec.sampling.steps <= MAX_STEPS,
            f"sampling.steps must be in [1, {MAX_STEPS:,}]",
        ),
        (0 <= spec.sampling.seed <= MAX_SEED, f"sampling.seed must be in [0, {MAX_SEED}]"),
        (spec.sampling.n is None or spec.sampling.n >= 1, "sampling.n must be >= 1"),
        (
            spec.sampling.decode in (None, *DECODINGS),
            f"sampling.decode must be one of {', '.join(DECODINGS)}, got {spec.sampling.decode!r}",
        ),
        (
            spec.sampling.sampler in (None, *SAMPLERS),
            f"sampling.sampler must be one of {', '.join(SAMPLERS)}, got {spec.sampling.sampler!r}",
        ),
        (
            spec.sampling.block_length is None or spec.sampling.block_length >= 0,
            "sampling.block_length must be >= 0 (0: one block)",
        ),
        (
            math.isfinite(spec.sampling.temperature) and 0 < spec.sampling.temperature <= 100,
            f"sampling.temperature must be in (0, 100], got {spec.sampling.temperature}",
        ),
        (
            0 < spec.sampling.top_p <= 1,
            f"sampling.top_p must be in (0, 1], got {spec.sampling.top_p}",
        ),
        (
            spec.sampling.dtype in (None, *DTYPE_NAMES),
            f"sampling.dtype must be one of {', '.join(DTYPE_NAMES)}, got {spec.sampling.dtype!r}",
        ),
    ]
    for ok, message in rules:
        if not ok:
            raise InputError(f"{where}: {message}")
    if spec.words not in SCHEMES:
        raise InputError(f"{where}: words must be one of {', '.join(SCHEMES)}, got {spec.words!r}")
    check_lexical_together(spec.constraints, spec.words)
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
            raise InputError(f"{name} must be one of {', '.join(METHODS)}, got {method!r}")
        given = [f.name for f in fields(spec.projection)]
        written = [k for k in given if getattr(spec.projection, k) is not None]
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
            low, high = SAMPLING_RANGES.get(name, (1, None))
            if value < low or (high is not None and value > high):
                within = f"in [{low}, {high:,}]" if high is not None else "positive"
                raise InputError(f"{flag} must be {within}, got {value}")
            setattr(spec.sampling, name, value)
    for name, value in choices.items():
        if value is not None:
            setattr(spec.sampling, name, value)
    spec.words = words or spec.words
    if model is not None and not model.strip():
        raise InputError(f"{'--model' if flags else 'model'} is empty")
    spec.model = model or spec.model
    check_settings(spec, spec.source)
    return spec


def constraint_from_flags(name: str, tau: float | None) -> ConstraintSpec:
    if name in SPEC_ONLY:
        keys = ", ".join(CONSTRAINT_KEYS[name])
        raise InputError(
            f"--constraint {name}: its options ({keys}) are given in a spec file: use --spec "
            "FILE (`cdd constraints ls` lists the keys)"
        )
    options = {} if tau is None else {"tau": tau}
    if name in PROPERTIES and tau is not None:  # --tau is the property's natural bound
        options = {PROPERTIES[name].flag: tau}
    spec = ConstraintSpec(name, options, f"--constraint {name}")
    check_constraint(spec)
    return spec


def dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def constraint_rows() -> list[dict]:
    """One row per constraint type, built in or a plugin's (a broken plugin: why): what
    `cdd constraints ls` prints."""

    def entry(name: str, source: str, description: str) -> dict:
        bounds = tau_range(name)
        bounded = bounds is not None and bounds != (-math.inf, math.inf)
        keys = keys_of(name, name)
        return {
            "type": name,
            "domain": domain_of(name),
            "keys": {k: {"required": required} for k, (_, required) in keys.items()},
            "tau_range": list(bounds) if bounded else None,
            "source": source,
            "description": description,
        }

    rows = [entry(name, "built-in", DESCRIPTIONS[name]) for name in CONSTRAINT_KEYS]
    for found in plugins.installed(BUILTIN):
        if found.plugin is None:
            rows.append({"type": found.name, "source": found.package, "broken": found.problem})
        else:
            rows.append(entry(found.name, found.package, found.plugin.description))
    return rows
