"""Well-formed SMILES decoding: the automaton against RDKit, and the Viterbi search against
brute force."""

from __future__ import annotations

import gzip
import itertools

import pytest
import torch
from rdkit import Chem

from cdd_cli.diffusion.processes import make_process
from cdd_cli.diffusion.sampler import Sampler, sample_generator
from cdd_cli.models import registry
from cdd_cli.models.smiles_syntax import SmilesSyntax
from cdd_cli.models.tokenizers import SmilesTokenizer

LENGTH = 16
# RDKit's verdict on each (parsed without sanitising: syntax only).
WELL_FORMED = ["C", "CC(=O)O", "C(C)1CC1", "C1CC(C1)", "C=1CC1", "C(C)(C)(C)C", "C1CC2CC1C2"]
ILL_FORMED = ["C11", "C1C1", "C(1)", "CC)", "C(C", "C1CC", "C=", "C1(C1)", "C1(CC)1",
              "C1(CC)C1", "((C))", "C()C", "=C"]  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer() -> SmilesTokenizer:
    return SmilesTokenizer(["C", "O", "N", "c", "1", "2", "(", ")", "=", "#"])


@pytest.fixture(scope="module")
def syntax(tokenizer: SmilesTokenizer) -> SmilesSyntax:
    return tokenizer.syntax()


def test_the_automaton_agrees_with_rdkit(tokenizer: SmilesTokenizer, syntax: SmilesSyntax):
    for smiles in WELL_FORMED + ILL_FORMED:
        parses = Chem.MolFromSmiles(smiles, sanitize=False) is not None
        assert parses == (smiles in WELL_FORMED), smiles
        ids = torch.tensor([tokenizer.encode(smiles, LENGTH)])
        assert syntax.accepts(ids) == [parses], smiles


@pytest.mark.slow
def test_every_training_molecule_is_well_formed():
    loaded = registry.load("default-molecules", "molecules", "cpu")
    path = loaded.directory / "reference.smi.gz"
    with gzip.open(path, "rt") as lines:
        smiles = [s.strip() for s in itertools.islice(lines, 1, 20001)]
    rows = [loaded.tokenizer.encode(s, loaded.config.model_length) for s in smiles]
    ids = torch.tensor([r for r in rows if r is not None])
    assert len(ids) > 19000
    assert all(loaded.tokenizer.syntax().accepts(ids))


@pytest.mark.slow
def test_the_search_finds_the_most_probable_well_formed_sequence():
    # Brute force over every sequence of a 9-token vocabulary (no specials but the layout's).
    tokenizer = SmilesTokenizer(["C", "1", "(", ")", "="])
    syntax = tokenizer.syntax()
    length = 7
    usable = [0, 1, 3, 5, 6, 7, 8, 9]  # every id but <mask> and <unk>
    # Every sequence that starts with <bos> (the automaton accepts no other).
    every = torch.tensor([(0, *rest) for rest in itertools.product(usable, repeat=length - 1)])
    well_formed = every[torch.tensor(syntax.accepts(every))]
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(24, length, len(tokenizer), generator=generator) * 3
    probs = logits.softmax(-1)
    best = syntax.best(probs)
    assert best is not None
    logp = probs.log()
    for row in range(len(probs)):
        scores = logp[row].gather(-1, well_formed.T).sum(0)
        found = logp[row].gather(-1, best[row][:, None]).sum()
        assert syntax.accepts(best[row][None]) == [True]
        assert torch.isclose(found, scores.max()), row


def test_a_well_formed_argmax_is_left_alone(tokenizer: SmilesTokenizer, syntax: SmilesSyntax):
    ids = torch.tensor([tokenizer.encode(s, LENGTH) for s in WELL_FORMED])
    probs = torch.nn.functional.one_hot(ids, len(tokenizer)).float() * 0.9 + 0.1 / len(tokenizer)
    assert syntax.best(probs) is None
    broken = torch.tensor([tokenizer.encode("C(C", LENGTH)])
    probs = torch.nn.functional.one_hot(broken, len(tokenizer)).float() * 0.9 + 0.01
    fixed = syntax.best(probs)
    assert fixed is not None and syntax.accepts(fixed) == [True]


@pytest.mark.slow
def test_the_sampler_writes_only_well_formed_smiles():
    loaded = registry.load("default-molecules", "molecules", "cpu")
    process = make_process("uniform", loaded.config.vocab_size, loaded.tokenizer.mask_id)
    syntax = loaded.tokenizer.syntax()
    generators = [sample_generator(3, 0, i) for i in range(48)]
    plain = Sampler(loaded.model, process, 8, True).sample(generators, loaded.config.model_length)
    generators = [sample_generator(3, 0, i) for i in range(48)]
    sampler = Sampler(loaded.model, process, 8, True, syntax)
    ids = sampler.sample(generators, loaded.config.model_length)
    assert all(syntax.accepts(ids))
    assert not all(syntax.accepts(plain))  # without it, some are not: the test can fail
    parsed = [Chem.MolFromSmiles(s, sanitize=False) for s in loaded.tokenizer.decode_batch(ids)]
    assert sum(m is not None for m in parsed) >= 46  # the automaton misses only rare cases


@pytest.mark.slow
def test_decode_plain_reads_the_argmax_and_the_records_say_which():
    """`--decode plain` (what published validity tables measure) turns the syntax off at the
    last step: the same seeds give some SMILES the syntax rejects; well-formed gives none.
    Each record names its decoding, and a file holds one decoding."""
    import json

    from typer.testing import CliRunner

    from cdd_cli.cli.app import app

    loaded = registry.load("default-molecules", "molecules", "cpu")
    tokenizer, syntax = loaded.tokenizer, loaded.tokenizer.syntax()
    runner = CliRunner()
    args = ["molecules", "-n", "48", "--steps", "8", "--seed", "3", "--quiet"]
    by_decoding = {}
    for decoding in ("well-formed", "plain"):
        result = runner.invoke(app, [*args, "--decode", decoding])
        assert result.exit_code == 0, result.stderr
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert {r["decode"] for r in rows} == {decoding}
        ids = torch.tensor([tokenizer.encode(r["text"], loaded.config.model_length) for r in rows])
        by_decoding[decoding] = syntax.accepts(ids)
    assert all(by_decoding["well-formed"]) and not all(by_decoding["plain"])
    bad = runner.invoke(app, [*args, "--decode", "greedy"])
    assert bad.exit_code == 2 and "--decode must be one of well-formed, plain" in bad.stderr


def test_readable_is_necessary_for_rdkit_as_decode_reads_a_sequence():
    """`SmilesTokenizer.readable` lets the judges skip what RDKit cannot parse: it must never
    refuse a sequence whose decoded text RDKit reads (here: training molecules with 1-3
    random tokens flipped, read as `decode` reads them: padding skipped, the first `<eos>`
    ends the text)."""
    loaded = registry.load("default-molecules", "molecules", "cpu")
    tokenizer, length = loaded.tokenizer, loaded.config.model_length
    with gzip.open(loaded.directory / "reference.smi.gz", "rt") as lines:
        smiles = [s.strip() for s in itertools.islice(lines, 1, 801)]
    generator = torch.Generator().manual_seed(0)
    verdicts = {(True, True): 0, (False, False): 0, (True, False): 0}
    for s in smiles:
        ids = tokenizer.encode(s, length)
        if ids is None:
            continue
        for _ in range(4):
            flipped = list(ids)
            for _ in range(int(torch.randint(1, 4, (1,), generator=generator))):
                at = int(torch.randint(0, length, (1,), generator=generator))
                flipped[at] = int(torch.randint(0, len(tokenizer.vocab), (1,), generator=generator))
            text = tokenizer.decode(flipped)
            parses = bool(text) and Chem.MolFromSmiles(text, sanitize=False) is not None
            readable = tokenizer.readable(flipped)
            assert readable or not parses, text
            verdicts[readable, parses] += 1
    # Both verdicts occur: the check refuses most of what RDKit refuses, none it reads.
    assert verdicts[False, False] > verdicts[True, False] > 0 and verdicts[True, True] > 500


def test_readable_reads_a_ring_bond_after_a_branch_which_the_sampler_never_writes(
    tokenizer: SmilesTokenizer, syntax: SmilesSyntax
):
    ids = tokenizer.encode("CC1CC(CO)=1", LENGTH)
    assert Chem.MolFromSmiles("CC1CC(CO)=1") is not None
    assert tokenizer.readable(ids) and syntax.accepts(torch.tensor([ids])) == [False]
    padded = [ids[0], tokenizer.pad_id, *ids[1:-1]]  # decode skips padding anywhere
    assert tokenizer.readable(padded)
    for smiles in ILL_FORMED:
        assert not tokenizer.readable(tokenizer.encode(smiles, LENGTH)), smiles
    assert not tokenizer.readable([tokenizer.bos_id, tokenizer.eos_id])  # the empty text


def one_hot_rows(tokenizer: SmilesTokenizer, *smiles: str, sharp: float = 1.0) -> torch.Tensor:
    """Probabilities [B, LENGTH, V] with `sharp` on each SMILES' layout, the rest spread."""
    ids = torch.tensor([tokenizer.encode(s, LENGTH) for s in smiles])
    spread = (1 - sharp) / (len(tokenizer) - 1)
    probs = torch.full((len(smiles), LENGTH, len(tokenizer)), spread)
    return probs.scatter_(-1, ids[..., None], sharp)


def test_a_prediction_with_no_well_formed_sequence_of_positive_probability_is_read_well_formed(
    tokenizer: SmilesTokenizer, syntax: SmilesSyntax
):
    # A projection can leave a position one-hot on a token no well-formed SMILES has there:
    # the decoding still reads a well-formed sequence (it used to keep the argmax, "CC)").
    probs = one_hot_rows(tokenizer, "CC)", "C(C", "CCO")
    best = syntax.best(probs)
    assert best is not None and syntax.accepts(best) == [True, True, True]
    assert torch.equal(best[2], probs[2].argmax(-1))  # a well-formed argmax as it was


def test_a_final_repair_that_finds_nothing_keeps_the_well_formed_reading(
    tokenizer: SmilesTokenizer, syntax: SmilesSyntax
):
    """The flip search at the final prediction decodes through the well-formed decoding: a
    sample it cannot repair keeps the well-formed reading of its prediction, never an argmax
    SMILES syntax refuses (records of `-c qed --tau 0.5 -c mw --tau 140` read `CC(())C...`)."""
    from dataclasses import dataclass

    from cdd_cli.constraints.base import ExactConstraint
    from cdd_cli.diffusion.sampler import StepInfo, well_formed
    from cdd_cli.projection.judges import Judges
    from cdd_cli.projection.stages import FlipSearch
    from cdd_cli.projection.step import Accounts, Step
    from cdd_cli.settings import SearchSettings

    @dataclass(frozen=True)
    class Never(ExactConstraint):  # no text is ever acceptable: the search finds nothing
        tau: float = 1.0
        upper_bound: bool = False

        def judge(self, texts: list[str]) -> list[float | None]:
            return [0.0] * len(texts)

    probs = one_hot_rows(tokenizer, "CC)C", sharp=0.9)
    x = probs.argmax(-1)
    assert syntax.accepts(x) == [False]
    fixed = torch.zeros_like(x, dtype=torch.bool)
    judges = Judges([Never()], tokenizer.decode, lambda ids: ids < 0, tokenizer.readable)
    stage = FlipSearch(
        judges, SearchSettings(2, 20, None), None, lambda p: well_formed(p, syntax), True
    )
    step = Step(probs, x, StepInfo(4, 4, 0.5, 0.0), fixed, [False], torch.zeros(1, dtype=bool))
    step.accepted = torch.tensor([False])
    stage.run(step, Accounts(1))
    assert syntax.accepts(step.probs.argmax(-1)) == [True]
