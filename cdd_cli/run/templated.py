"""A run of `cdd generate --template`: the template laid out as the prompt's canvas, a
constraint that certifies its fixed text, and constraints scoped to one blank.

Constraints judge the whole text unless their entry names a blank (`blank: NAME`, or its
number): then the judge reads that blank's fill (the decoding of its token positions, which
`TemplateText` hands the judges as `FilledTemplate.fills`), and a surrogate reads the same
positions. A blank-scoped constraint is projected by
its surrogate or the exact search; a closed-form layout (the lexical family's) is not laid
out inside a blank, so such a constraint there is judged and redrawn only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from cdd_cli.constraints.base import (
    ClosedFormBuilder,
    Constraint,
    DifferentiableConstraint,
    ExactConstraint,
)
from cdd_cli.constraints.descriptor import ConstraintSpec
from cdd_cli.constraints.registry import build_constraints, unique_names
from cdd_cli.diffusion.sampler import Canvas
from cdd_cli.errors import InputError
from cdd_cli.models.registry import LoadedModel
from cdd_cli.models.surrogate import Tokens
from cdd_cli.prompts import PromptInput
from cdd_cli.run.domains import Domain
from cdd_cli.run.drawing import Prompt
from cdd_cli.spec.entries import BLANK_KEY
from cdd_cli.spec.model import Spec
from cdd_cli.templates import (
    FilledTemplate,
    Layout,
    blank_lengths,
    lay_out,
    parse_template,
    tokens,
)

# A template's samples are first drawn this many times as the model's own (`repair.own_draws`):
# judged and kept as drawn, an exact sample of the constrained law; the projection steers
# the draws after. Steering every draw bent a short blank's fills (toxicity <= 0.05 on a
# 12-token blank, 256 fills against rejection's: KS on the score 2.12-2.18x its permutation
# null); with 3 own draws every measure stayed within 1.87x over four seeds (2: 1.90x) at
# the same CPU time a record, and a bound no own fill holds cost 1.34x (bench/README.md
# "How close to rejection's fills").
TEMPLATE_OWN_DRAWS = 3


@dataclass(frozen=True)
class FixedText(ExactConstraint):
    """The template's fixed parts are in the text, in order, exactly as written (1) or not
    (0): an independent string check of the decoded text, whatever the sampler kept."""

    layout: Layout | None = field(default=None, compare=False, repr=False)
    tau: float = 1.0
    name: str = "fixed_text"
    judge_name: str = "template-string-match"
    upper_bound: bool = False

    def judge(self, texts: list[str]) -> list[float | None]:
        return [float(self.layout.holds_fixed(t)) for t in texts]


@dataclass(frozen=True)
class OnBlank:
    """A constraint (`inner`) that judges one blank's fill; its threshold fields are the
    inner constraint's. Unbound (`layout` None) until the run's template is known."""

    inner: Constraint | None = None
    blank: str = ""
    layout: Layout | None = field(default=None, compare=False, repr=False)

    @property
    def repair_unit(self) -> float:
        return self.inner.repair_unit

    def fills(self, texts: list[str]) -> list[str]:
        if self.layout is None:
            raise InputError(f"constraint {self.name}: names blank '{self.blank}' unbound")
        k = self.layout.template.blank(self.blank)
        # A text not drawn on the template's canvas (an unreadable sequence's "") is judged
        # whole: it has no blanks to read.
        return [t.fills[k] if isinstance(t, FilledTemplate) else t for t in texts]

    def label(self) -> str:
        return f"{self.inner.label()} in blank {self.blank}"

    def judge(self, texts: list[str]) -> list[float | None]:
        return self.inner.judge(self.fills(texts))

    def explain(self, text: str) -> str | None:
        return self.inner.explain(self.fills([text])[0])

    def remember(self, texts: list[str]) -> None:
        self.inner.remember(self.fills(texts))

    def for_run(self) -> Constraint:
        return replace(self, inner=self.inner.for_run())

    def with_prompt(self, prompt: str, prompt_length: int) -> Constraint:
        return self  # a template has no prompt: the blank is all it reads

    def closed_form(self) -> ClosedFormBuilder | None:
        return None


@dataclass(frozen=True)
class JudgedOnBlank(OnBlank, ExactConstraint):
    pass


@dataclass(frozen=True)
class SurrogateOnBlank(OnBlank, DifferentiableConstraint):
    def surrogate(self, soft_tokens: Tokens) -> torch.Tensor:
        start, end = self.layout.span(self.layout.template.blank(self.blank))
        return self.inner.surrogate(soft_tokens[:, start:end])


def on_blank(inner: Constraint, blank: str) -> Constraint:
    """`inner` judged on blank `blank` alone."""
    kind = SurrogateOnBlank if isinstance(inner, DifferentiableConstraint) else JudgedOnBlank
    return kind(
        tau=inner.tau, margin=inner.margin, name=inner.name, judge_name=inner.judge_name,
        upper_bound=inner.upper_bound, inner=inner, blank=blank,
    )  # fmt: skip


def build_scoped(
    specs: list[ConstraintSpec], model: LoadedModel, device: str, words: str = "plain"
) -> list[Constraint]:
    """`build_constraints` of `specs`, each entry that names a blank built without the key
    and scoped to that blank (bound to a template by `bind`)."""
    if not any(BLANK_KEY in s.options for s in specs):
        return build_constraints(specs, model, device, words)
    built: list[Constraint] = []
    for spec in specs:
        blank = spec.options.get(BLANK_KEY)
        options = {k: v for k, v in spec.options.items() if k != BLANK_KEY}
        made = build_constraints([replace(spec, options=options)], model, device, words)
        built += [on_blank(c, str(blank)) for c in made] if blank is not None else made
    return unique_names(built)


def bind(constraints: list[Constraint], layout: Layout | None) -> list[Constraint]:
    """The run's constraints for `layout` (None: no template): blank-scoped ones told the
    layout, and the fixed text's certificate added."""
    if layout is None:
        for c in constraints:
            if isinstance(c, OnBlank):
                raise InputError(
                    f"constraint {c.name} names blank '{c.blank}', but the run has no "
                    "template (--template)"
                )
        return constraints
    bound: list[Constraint] = []
    for c in constraints:
        if isinstance(c, OnBlank):
            layout.template.blank(c.blank)  # a blank the template has
            c = replace(c, layout=layout)
        bound.append(c)
    return [*bound, FixedText(layout=layout)]


def run_prompts(
    domain: Domain,
    given: list[PromptInput | None],
    length: int | None,
    loaded: LoadedModel,
    spec: Spec,
) -> tuple[list[Prompt], int]:
    """The run's prompts as the sampler sees them and its length: the domain's, or a
    template's one canvas (its length: the laid-out template's)."""
    templates = [g for g in given if g is not None and g.template]
    if not templates:
        return domain.prompts(given, length, loaded, spec.sampling.chat)
    if len(given) > 1:
        raise InputError("a run takes one template, and no prompts beside it")
    if length is not None:
        raise InputError("a template's blanks give its length: give no --length")
    if spec.sampling.chat:
        raise InputError("a template is not wrapped in a chat template: give no --chat")
    prompt = template_prompt(templates[0], loaded, spec.sampling.seed)
    return [prompt], prompt.canvas.length


def template_prompt(given: PromptInput, loaded: LoadedModel, seed: int) -> Prompt:
    """The template `given` laid out for `loaded`'s tokenizer, its blanks' lengths drawn
    from `seed`; refused where its fixed text and longest blanks exceed the model's length."""
    template = parse_template(given.text)
    tokenizer = loaded.tokenizer
    layout = lay_out(template, tokenizer.encode, blank_lengths(template, seed))
    limit = loaded.config.model_length
    fixed = sum(map(len, layout.fixed_ids))
    longest = fixed + sum(b.high for b in template.blanks)
    if longest > limit:
        raise InputError(
            f"--template: its fixed text ({tokens(fixed)}) and longest blanks "
            f"({tokens(longest - fixed)}) exceed model {loaded.name}'s length of {tokens(limit)}"
        )
    ids, kept = layout.ids_and_kept()
    canvas = Canvas(torch.tensor([ids]), torch.tensor([kept]))
    return Prompt(0, None, id=given.id, given=given.text, canvas=canvas, layout=layout)
