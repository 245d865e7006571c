"""Shared fixtures: small real models that the tests build themselves."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from cdd_cli.evaluate.reference import write_smiles
from cdd_cli.models.checkpoint import ModelConfig, save_model
from cdd_cli.models.dit import DiffusionModel
from cdd_cli.models.surrogate import SoftTokenRegressor, SurrogateConfig, save_surrogate
from cdd_cli.models.tokenizers import Gpt2Tokenizer, SmilesTokenizer

# No test may reach a model hub (house rule 2): were one to try, huggingface_hub and
# transformers refuse instead of downloading.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

# One torch thread a process (the commands the tests start inherit it) unless OMP_NUM_THREADS
# says otherwise: the models here are tiny, and on a busy machine threads wait for each other's
# cores (at load 3 on two cores one test took 3.8 s at one thread, 18 s at two).
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# Real QM9 molecules (canonical, stereo-free), enough to build the full 30-token vocabulary.
QM9_SAMPLE = [
    "C",
    "N",
    "O",
    "C#C",
    "C#N",
    "C=O",
    "CC",
    "CO",
    "CC#C",
    "CC#N",
    "CC=O",
    "NC=O",
    "CCC",
    "CCO",
    "COC",
    "C1CC1",
    "C1CO1",
    "CC(C)=O",
    "CC(N)=O",
    "NC(=O)C#N",
    "c1cc[nH]c1",
    "c1ccoc1",
    "Cc1ccc[nH]1",
    "O=C1CCC1",
    "C1=CCC=C1",
    "CC1(C)CC1",
    "OC1COC1",
    "FC(F)F",
    "CC[NH3+]",
    "C[NH2+]C",
    "CC(=O)[O-]",
    "C[N+](C)(C)C",
    "[NH3+]CC(=O)[O-]",
    "C#C[C-]1C=CN=N1",
    "c1cn[n-]c1",
    "[cH-]1cccc1",
    "CC[NH+](C)C",
    "C[CH-]C#N",
    "[N-]=[N+]=NC",
    "c1c[nH+]c[nH]1",
    "[C-]#[N+]C",
    "N#C[c-]1ccc(=[NH2+])o1",
    "CC12CC3CC1C32",
    "OC1C2CC3C1CC23",
    "CC(C)C1=CC(C)=CC1C",
    "CC1C2CC3C4C2CC14C3",
    "C1C2CC3C1CC1C3C21",
    "CC1C2C3C4C1CC234",
    "CC1=C2C3CC4C3C2C14",
    "C1C2C3CC4C1C3C24",
    "C12C3C4C5C1C2C3C45",
    "C1C2C3C4C1C1C2C3C41",
    "CC1C2C3C4C5CC12C345",
    "c1cc2cc[nH]cc-2c1",
]


def make_tokenizer() -> SmilesTokenizer:
    return SmilesTokenizer.from_corpus(QM9_SAMPLE)


def build_model_dir(
    path: Path,
    noise: str = "uniform",
    length: int = 24,
    seed: int = 0,
    hidden_dim: int = 32,
    n_blocks: int = 2,
    tokenizer: SmilesTokenizer | None = None,
) -> Path:
    """A tiny random model in our checkpoint format, with tokenizer and reference set.

    Weights are drawn far from the zero initialisation so that predictions depend on the input
    (a zero output layer would make every prediction uniform and hide batch-mixing bugs).
    """
    tokenizer = tokenizer or make_tokenizer()
    config = ModelConfig(
        vocab_size=len(tokenizer),
        model_length=length,
        hidden_dim=hidden_dim,
        cond_dim=16,
        n_blocks=n_blocks,
        n_heads=2,
        dropout=0.0,
        time_conditioning=noise == "uniform",
        model_type="udlm" if noise == "uniform" else "mdlm",
        noise=noise,
    )
    torch.manual_seed(seed)
    model = DiffusionModel(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    save_model(model, path, extra={"tokenizer": tokenizer.kind, "default_sampling_steps": 8})
    tokenizer.save(path)
    write_smiles(path / "reference.smi.gz", QM9_SAMPLE, "tests")
    return path


@pytest.fixture(scope="session")
def uniform_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("uniform"), "uniform")


@pytest.fixture(scope="session")
def shipped_vocab_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model over the shipped QM9 vocabulary, so the shipped SA surrogate applies."""
    from cdd_cli.models.registry import ASSETS
    from cdd_cli.models.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(ASSETS / "qm9-udlm")
    return build_model_dir(tmp_path_factory.mktemp("shipped-vocab"), tokenizer=tokenizer)


@pytest.fixture(scope="session")
def masked_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("masked"), "masked")


V_GPT2 = 50258


def build_text_model(path: Path, noise: str = "masked", length: int = 48) -> Path:
    config = ModelConfig(
        vocab_size=V_GPT2,
        model_length=length,
        hidden_dim=16,
        cond_dim=8,
        n_blocks=1,
        n_heads=2,
        dropout=0.0,
        time_conditioning=noise == "uniform",
        model_type="mdlm" if noise == "masked" else "udlm",
        noise=noise,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = DiffusionModel(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    save_model(model, path, extra={"default_sampling_steps": 6})
    Gpt2Tokenizer().save(path)
    return path


@pytest.fixture(scope="module")
def text_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_text_model(tmp_path_factory.mktemp("text"))


@pytest.fixture(scope="module")
def toxicity_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small random classifier over GPT-2 tokens: scores spread over (0, 1)."""
    torch.manual_seed(1)
    net = SoftTokenRegressor(
        SurrogateConfig(
            vocab_size=V_GPT2, max_length=64, target="toxicity", hidden_dim=8, n_layers=1
        )
    )
    with torch.no_grad():
        net.embedding.normal_(0, 1.0)
    path = tmp_path_factory.mktemp("toxicity")
    save_surrogate(net, path, {"output": "logit"})
    Gpt2Tokenizer().save(path)
    return path


EXAMPLE_PLUGIN = Path(__file__).resolve().parents[1] / "examples" / "cdd-plugin-example"


@pytest.fixture(scope="session")
def example_plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that, on the path, is `examples/cdd-plugin-example` installed: its package and
    the `.dist-info` that `pip install` would write (name, version, the entry points of its
    pyproject.toml). Set-up leaves the example out of the venv (a user's own plugin of the same
    name would clash with it); the tests that use it put this folder on the path."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the TOML reader pytest itself requires there
        import tomli as tomllib

    pyproject = tomllib.loads((EXAMPLE_PLUGIN / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    folder = tmp_path_factory.mktemp("example-plugin")
    for package in pyproject["tool"]["setuptools"]["packages"]:
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(EXAMPLE_PLUGIN / package, folder / package, ignore=ignore)
    name, version = project["name"], project["version"]
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    groups = [
        "\n".join([f"[{group}]", *(f"{key} = {value}" for key, value in entries.items())])
        for group, entries in project["entry-points"].items()
    ]
    (info / "entry_points.txt").write_text("\n\n".join(groups) + "\n")
    return folder


@pytest.fixture
def example_plugin(example_plugin_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The example plugin installed for one test: in this process, and in the processes it
    starts (PYTHONPATH). Entry points are read afresh on both sides of the test."""
    from cdd_cli import plugins

    monkeypatch.syspath_prepend(str(example_plugin_path))
    inherited = os.environ.get("PYTHONPATH")
    paths = [str(example_plugin_path), *([inherited] if inherited else [])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    plugins._entry_points.cache_clear()
    plugins._load.cache_clear()
    yield example_plugin_path
    plugins._entry_points.cache_clear()
    plugins._load.cache_clear()


# The fast lane (`pytest -m "not slow"`, README): most slow tests carry `@pytest.mark.slow`
# themselves; these, in modules kept by others, by module and test-name prefix.
SLOW_ELSEWHERE = {
    "test_bad_inputs.py": ("test_a_full_standard_output",),  # a process a command
    "test_readme.py": ("test_every_readme_command_runs",),  # the README's commands, each run
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.name.startswith(SLOW_ELSEWHERE.get(item.path.name, ())):
            item.add_marker(pytest.mark.slow)
