"""One prepared GPU check (issue 47, item 4): correctness of every constraint family under every
sampler on the GPU, throughput at real shapes, molecules per second. Nothing here has run on a
GPU yet; `--device cpu --quick` runs the same code paths with tiny sizes.

    python bench/gpu_check.py --device cuda --out $OUT          # on the device (bench/gpu_check.sh)
    OMP_NUM_THREADS=1 python bench/gpu_check.py --device cpu --quick --out /tmp/gpucheck

Writes `gpu_check.json` (everything) and `gpu_check.md` (short tables) under `--out`, again
after every part, so a run stopped by its timeout keeps what it measured. Each part runs in its
own try/except: one failure is recorded (`error`) and the others still run. `--budget` seconds
(from the start) bounds the whole check; a part that would start past it is `skipped`.

Parts:
- correctness: every constraint family (SA, properties qed/mw, novelty, a molecule plugin;
  toxicity, lexical words spec, COLLIE words, counting, regex, JSON Schema, a text plugin) under
  every sampler (ancestral, confidence, margin, entropy, blocks = confidence with
  `block_length`, and uniform = a uniform-noise model's ancestral sampler) on `--device`, through
  `cdd_cli.api.Generator`: violations by the exact judges (a record's `satisfied`), and the same
  job on the CPU with the same seed: how many records' texts differ (recorded, never fatal).
  Models: the shipped default-molecules (uniform) and default-text (masked), and the tests'
  tiny random models (a masked SMILES model over the shipped vocabulary, a uniform GPT-2 one).
- dit: the mdlm-owt DiT shape (V 50,258, hidden 768, 12 blocks, 12 heads, cond 128, L 1024)
  with random weights, written as a model directory (`config.json` + `model.safetensors`),
  loaded by `cdd.load_model` and cast to bfloat16, batch 64: sampler steps/s unconstrained vs
  with the shipped toxicity surrogate (tau 0.5) vs a JSON Schema vs the lexical spec
  (bench/lexical.yaml); overhead ratios; peak GPU memory (torch.cuda.max_memory_allocated).
- molecules: default-molecules at batch 256, molecules/s unconstrained vs SA tau 3.5 vs the
  druglike spec (bench/properties/druglike_sa.yaml: PAINS, Lipinski, SA 3.5).
- llada: an LLaDA-8B-shaped `A2DModel` (cdd's reader of LLaDA directories) built with random
  bfloat16 weights directly on the device (no 16 GB file): model calls/s (forward passes, which
  is what one unconstrained sampler step costs) at batch 16 x 512 tokens, and peak memory.
  cdd's sampler itself is not run on it (no LLaDA tokenizer travels to the device);
  `--no-llada` leaves it out.

TODO (issue 47, not done here): the authors' own samplers. Comparing cdd's unconstrained
sampler with MDLM's (kuleshov-group/mdlm, `diffusion.py`'s ddpm_cache sampler) and LLaDA's
(`generate.py`, low-confidence remasking) at the same shapes needs their code installed on the
device (carried as a wheel or a checkout under an ignored folder); it is not copied here. The
arm would time their sampler on the same random-weight DiT / LLaDA model and add rows to the
`dit` and `llada` tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from importlib import metadata
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the tests' model builders (tests/conftest.py)
    sys.path.insert(0, str(ROOT))

from stage_times import Passes  # noqa: E402 (bench/ is the script's folder)

import cdd_cli as cdd  # noqa: E402
from cdd_cli.api import Model  # noqa: E402

START = time.perf_counter()
# Fields of a record that depend on timing or the clock, not on what was sampled.
VOLATILE = {"seconds", "created", "projection"}


def log(message: str) -> None:
    print(f"[{time.perf_counter() - START:7.1f}s] {message}", flush=True)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_mb(device: str) -> float | None:
    if device.startswith("cuda"):
        return round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return None


def short_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


class Check:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
        self.results: dict = {"environment": environment(args.device), "parts": {}}

    def left(self) -> float:
        return self.args.budget - (time.perf_counter() - START)

    def part(self, name: str, run, need: float = 0.0) -> None:
        if self.left() < need:
            self.results["parts"][name] = {"skipped": f"budget: {self.left():.0f} s left"}
            log(f"{name}: skipped (budget)")
            self.save()
            return
        log(f"{name}: start")
        started = time.perf_counter()
        entry: dict = {}
        self.results["parts"][name] = entry
        try:
            run(entry)
        except Exception as exc:  # one part's failure must not lose the others' results
            entry["error"] = short_error(exc)
            entry["traceback"] = traceback.format_exc()[-3000:]
            log(f"{name}: ERROR {entry['error']}")
        entry["seconds"] = round(time.perf_counter() - started, 1)
        log(f"{name}: done in {entry['seconds']} s")
        self.save()

    def save(self) -> None:
        self.results["elapsed_s"] = round(time.perf_counter() - START, 1)
        (self.out / "gpu_check.json").write_text(json.dumps(self.results, indent=1) + "\n")
        (self.out / "gpu_check.md").write_text(markdown(self.results))


def environment(device: str) -> dict:
    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cdd": getattr(cdd, "__version__", None),
        "device": device,
        "threads": torch.get_num_threads(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        env["gpu_memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 1e9, 1)
    for name in ("rdkit", "outlines_core", "jsonschema", "cdd_plugin_example"):
        try:
            __import__(name)
            env[name] = metadata.version(name.replace("_", "-"))
        except Exception as exc:
            env[name] = f"missing or unversioned ({short_error(exc)})"
    return env


# ---------------------------------------------------------------- correctness


SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def families() -> list[tuple[str, str, callable, dict]]:
    """(name, domain, constraints (made when the job runs), generate's keyword arguments)."""
    lexical = str(ROOT / "bench" / "lexical.yaml")
    return [
        ("sa", "molecules", lambda: [cdd.SA(tau=3.5)], {}),
        ("properties", "molecules",
         lambda: [cdd.constraint("qed", min=0.4), cdd.constraint("mw", max=140)], {}),
        ("novelty", "molecules", lambda: [cdd.Novelty()], {}),
        ("plugin-molecules", "molecules",
         lambda: [cdd.constraint("max_heavy_atoms", tau=8)], {}),
        ("toxicity", "text", lambda: [cdd.Toxicity(tau=0.5)], {"prompts": "The"}),
        ("lexical", "text", lambda: [], {"spec": lexical}),
        ("collie-words", "text",
         lambda: [cdd.Include(["ship"]), cdd.WordCount(min=4)], {"words": "collie"}),
        ("counting", "text", lambda: [cdd.Count()],
         {"prompts": "How many r's are in strawberry?"}),
        ("regex", "text", lambda: [cdd.Regex(r"[0-9]{3}-[0-9]{4}")], {"prompts": "Call:"}),
        ("json-schema", "text", lambda: [cdd.JsonSchema(SCHEMA)], {"prompts": "JSON:"}),
        ("plugin-text", "text", lambda: [cdd.constraint("uppercase", tau=0.2)],
         {"prompts": "The"}),
    ]  # fmt: skip


# (label, sampler, block_length, which noise of model); the order the jobs run in, so that a
# check stopped by its budget has every family under the first samplers.
SAMPLERS = [
    ("ancestral", "ancestral", None, "masked"),
    ("uniform", "ancestral", None, "uniform"),
    ("confidence", "confidence", None, "masked"),
    ("blocks", "confidence", 8, "masked"),
    ("margin", "margin", None, "masked"),
    ("entropy", "entropy", None, "masked"),
]


def violations(records: list[dict]) -> int:
    """Records an exact judge refused (`satisfied` is None where a run has no constraint)."""
    return sum(r["satisfied"] is False for r in records)


def valid_violations(records: list[dict]) -> int:
    """Refused records whose text is a valid molecule (or text): a random tiny SMILES model
    writes invalid strings that no projection of a property makes valid; a valid molecule
    that breaks its constraint would be the projection's failure."""
    return sum(r["satisfied"] is False and r.get("valid", True) for r in records)


def tiny_models(work: Path) -> dict[tuple[str, str], str]:
    """(domain, noise) -> model: the shipped ones and the tests' tiny random builds."""
    from cdd_cli.models.registry import ASSETS
    from cdd_cli.models.tokenizers import load_tokenizer
    from tests.conftest import build_model_dir, build_text_model

    shipped_vocab = load_tokenizer(ASSETS / "qm9-udlm")
    masked_smiles = build_model_dir(work / "masked-smiles", "masked", tokenizer=shipped_vocab)
    uniform_text = build_text_model(work / "uniform-text", noise="uniform")
    masked_text = "default-text"
    if not (ASSETS / "text-mdlm" / "model.safetensors").is_file():
        # Left behind to fit the device's 64 MiB (bench/README.md, "GPU check"): a tiny one.
        masked_text = str(build_text_model(work / "masked-text", length=64))
    return {
        ("molecules", "uniform"): "default-molecules",
        ("molecules", "masked"): str(masked_smiles),
        ("text", "masked"): masked_text,
        ("text", "uniform"): str(uniform_text),
    }


def run_job(model: str, domain: str, constraints, options: dict, sampler: str,
            block_length: int | None, device: str, args) -> list[dict]:  # fmt: skip
    options = dict(options)
    prompts = options.pop("prompts", None)
    spec = options.pop("spec", None)
    generator = cdd.Generator(
        model, constraints(), spec=spec, domain=domain, steps=args.steps,
        sampler=sampler, block_length=block_length, device=device, **options,
    )  # fmt: skip
    if domain == "molecules":
        return list(generator.molecules(n=args.n, seed=0))
    return list(generator.generate(prompts, n=args.n, length=args.length, seed=0))


def comparable(record: dict) -> str:
    return json.dumps({k: v for k, v in record.items() if k not in VOLATILE}, sort_keys=True)


def correctness(check: Check, entry: dict) -> None:
    args = check.args
    models = tiny_models(check.work)
    jobs = entry["jobs"] = []
    for label, sampler, block_length, noise in SAMPLERS:
        for name, domain, constraints, options in families():
            row: dict = {"family": name, "sampler": label}
            jobs.append(row)
            if check.left() < args.reserve:
                row["skipped"] = "budget"
                continue
            model = models[(domain, noise)]
            row["model"] = Path(model).name
            try:
                started = time.perf_counter()
                records = run_job(model, domain, constraints, options, sampler, block_length,
                                  args.device, args)  # fmt: skip
                row["seconds"] = round(time.perf_counter() - started, 2)
                row["n"] = len(records)
                row["violations"] = violations(records)
                row["valid_violations"] = valid_violations(records)
                row["invalid"] = sum(r.get("valid") is False for r in records)
                row["example"] = records[0]["text"][:60] if records else None
            except cdd.InputError as exc:  # a combination cdd refuses up front
                row["refused"] = short_error(exc)
                log(f"  {name} / {label}: refused: {row['refused'][:120]}")
                continue
            except Exception as exc:
                row["error"] = short_error(exc)
                log(f"  {name} / {label}: ERROR {row['error'][:160]}")
                continue
            try:
                reference = run_job(model, domain, constraints, options, sampler, block_length,
                                    "cpu", args)  # fmt: skip
                row["cpu_violations"] = violations(reference)
                ours = [comparable(r) for r in records]
                theirs = [comparable(r) for r in reference]
                row["differ_from_cpu"] = sum(a != b for a, b in zip(ours, theirs, strict=False))
                row["differ_from_cpu"] += abs(len(ours) - len(theirs))
                row["texts_differ_from_cpu"] = sum(
                    a["text"] != b["text"] for a, b in zip(records, reference, strict=False)
                )
            except Exception as exc:
                row["cpu_error"] = short_error(exc)
            check.save()
            log(
                f"  {name} / {label}: n {row['n']}, violations {row['violations']}, "
                f"cpu violations {row.get('cpu_violations')}, "
                f"texts differing from cpu {row.get('texts_differ_from_cpu')} "
                f"({row['seconds']} s)"
            )
    done = [j for j in jobs if "n" in j]
    entry["summary"] = {
        "jobs": len(jobs),
        "ran": len(done),
        "refused": sum("refused" in j for j in jobs),
        "errors": sum("error" in j for j in jobs),
        "skipped": sum("skipped" in j for j in jobs),
        "violations": sum(j["violations"] for j in done),
        "violations_of_valid_texts": sum(j["valid_violations"] for j in done),
        "invalid_molecules": sum(j["invalid"] for j in done),
        "cpu_violations": sum(j.get("cpu_violations", 0) for j in done),
        "jobs_differing_from_cpu": sum(bool(j.get("texts_differ_from_cpu")) for j in done),
    }


# ---------------------------------------------------------------- throughput: the DiT


def dit_directory(work: Path, quick: bool) -> tuple[Path, int]:
    from cdd_cli.models.checkpoint import ModelConfig, save_model
    from cdd_cli.models.dit import DiffusionModel
    from cdd_cli.models.tokenizers import Gpt2Tokenizer

    shape = (
        dict(model_length=128, hidden_dim=64, cond_dim=16, n_blocks=2, n_heads=2)
        if quick
        else dict(model_length=1024, hidden_dim=768, cond_dim=128, n_blocks=12, n_heads=12)
    )
    config = ModelConfig(
        vocab_size=50258, dropout=0.0, time_conditioning=False, model_type="mdlm",
        noise="masked", **shape,
    )  # fmt: skip
    torch.manual_seed(0)
    model = DiffusionModel(config)
    with torch.no_grad():  # random, far from the zero initialisation of the output layer
        for p in model.parameters():
            p.normal_(0, 0.02)
    path = work / "mdlm-owt-shape"
    save_model(model, path, dtype=torch.bfloat16, extra={"default_sampling_steps": 32})
    Gpt2Tokenizer().save(path)
    return path, sum(p.numel() for p in model.parameters())


def timed_run(make, run, device: str, steps: int) -> dict:
    """Build a generator, run it once to warm up, then time one run."""
    generator = make()
    run(generator, min(steps, 2))  # warm-up: kernels, automata, caches
    sync(device)
    reset_peak(device)
    started = time.perf_counter()
    records = run(generator, steps)
    sync(device)
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 3),
        "records": len(records),
        "violations": violations(records),
        "peak_mb": peak_mb(device),
    }


def dit(check: Check, entry: dict) -> None:
    args, device = check.args, check.args.device
    batch, steps = (4, 4) if args.quick else (64, args.dit_steps)
    started = time.perf_counter()
    path, parameters = dit_directory(check.work, args.quick)
    entry.update(parameters=parameters, batch=batch, steps=steps, dtype="bfloat16",
                 write_s=round(time.perf_counter() - started, 1))  # fmt: skip
    model = cdd.load_model(str(path), device=device)
    model.module.to(torch.bfloat16)  # cdd loads a DiT in float32; the sampler runs it as is
    length = (128 if args.quick else 1024) - 16  # room for the prompt
    entry["length"] = length
    arms = {
        "unconstrained": ([], None, "The"),
        "toxicity": ([cdd.Toxicity(tau=0.5)], None, "The"),
        "json_schema": ([cdd.JsonSchema(SCHEMA)], None, "JSON:"),
        "lexical": ([], str(ROOT / "bench" / "lexical.yaml"), "The"),
    }
    rows = entry["arms"] = {}
    for name, (constraints, spec, prompt) in arms.items():
        if check.left() < args.reserve:
            rows[name] = {"skipped": "budget"}
            continue
        try:

            def make(constraints=constraints, spec=spec):
                return cdd.Generator(model, constraints, spec=spec, domain="text",
                                     batch_size=batch)  # fmt: skip

            def run(generator, n_steps, prompt=prompt):
                generator.compiled.spec.sampling.steps = n_steps
                return list(generator.generate(prompt, n=batch, length=length, seed=0))

            row = timed_run(make, run, device, steps)
            row["steps_per_s"] = round(steps / row["seconds"], 3)
            rows[name] = row
            log(f"  dit {name}: {row}")
            check.save()  # a run killed at its timeout keeps the arms done
        except Exception as exc:
            rows[name] = {"error": short_error(exc)}
            log(f"  dit {name}: ERROR {rows[name]['error'][:200]}")
    add_overheads(rows)
    model.module.to("cpu")  # frees the device for the next part
    reset_peak(device)


def add_overheads(rows: dict) -> None:
    """Each arm's seconds over the unconstrained arm's, where both were measured."""
    base = rows.get("unconstrained", {}).get("seconds")
    for row in rows.values():
        if base and "seconds" in row:
            row["overhead_x"] = round(row["seconds"] / base, 2)


# ---------------------------------------------------------------- molecules


def molecules(check: Check, entry: dict) -> None:
    args, device = check.args, check.args.device
    batch = 8 if args.quick else 256
    n = batch * (1 if args.quick else args.molecule_batches)
    entry.update(batch=batch, n=n, model="default-molecules")
    model = cdd.Generator("default-molecules", device=device).compiled.loaded
    arms = {
        "unconstrained": ([], None),
        "sa_3.5": ([cdd.SA(tau=3.5)], None),
        "druglike": ([], str(ROOT / "bench" / "properties" / "druglike_sa.yaml")),
    }
    rows = entry["arms"] = {}
    for name, (constraints, spec) in arms.items():
        if check.left() < args.reserve:
            rows[name] = {"skipped": "budget"}
            continue
        try:
            generator = cdd.Generator(Model(model), constraints, spec=spec,
                                      domain="molecules", batch_size=batch)  # fmt: skip
            list(generator.molecules(n=batch, seed=1))  # warm-up
            sync(device)
            reset_peak(device)
            started = time.perf_counter()
            counter = Passes()  # on a GPU a pass costs nearly the same at any size
            records = list(generator.molecules(n=n, seed=0, reporter=counter))
            sync(device)
            seconds = time.perf_counter() - started
            rows[name] = {
                "seconds": round(seconds, 2),
                "records": len(records),
                "passes": counter.passes,
                "draws": counter.draws,
                "molecules_per_s": round(len(records) / seconds, 1),
                "violations": violations(records),
                "valid": sum(bool(r.get("valid")) for r in records),
                "peak_mb": peak_mb(device),
            }
            log(f"  molecules {name}: {rows[name]}")
            check.save()
        except Exception as exc:
            rows[name] = {"error": short_error(exc)}
            log(f"  molecules {name}: ERROR {rows[name]['error'][:200]}")
    add_overheads(rows)


# ---------------------------------------------------------------- LLaDA-8B shape


def llada(check: Check, entry: dict) -> None:
    from cdd_cli.models.a2d import A2DConfig, A2DModel

    args, device = check.args, check.args.device
    shape = (
        dict(vocab_size=1024, hidden_dim=64, n_layers=2, n_heads=4, n_kv_heads=4, ffn_dim=128)
        if args.quick
        else dict(
            vocab_size=126464,
            hidden_dim=4096,
            n_layers=32,
            n_heads=32,
            n_kv_heads=32,
            ffn_dim=12288,
        )
    )  # fmt: skip  (LLaDA-8B's config.json)
    config = A2DConfig(
        **shape, rope_theta=500000.0, rms_eps=1e-5, tie_word_embeddings=False,
        mask_id=shape["vocab_size"] - 128, logit_shift=False, prefix_id=-1,
        mask_embedding=False, model_length=4096,
    )  # fmt: skip
    batch, length = (2, 32) if args.quick else (16, 512)
    reset_peak(device)
    started = time.perf_counter()
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = A2DModel(config).eval()
    finally:
        torch.set_default_dtype(default)
    sync(device)
    parameters = sum(p.numel() for p in model.parameters())
    entry.update(parameters=parameters, build_s=round(time.perf_counter() - started, 1),
                 batch=batch, length=length, dtype="bfloat16")  # fmt: skip
    generator = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (batch, length), device=device, generator=generator)
    ids[:, length // 2 :] = config.mask_id
    sigma = torch.zeros(batch, device=device)
    calls = 2 if args.quick else 6
    with torch.inference_mode():
        model(ids, sigma)  # warm-up
        sync(device)
        started = time.perf_counter()
        for _ in range(calls):
            logits = model(ids, sigma)
        sync(device)
    seconds = time.perf_counter() - started
    entry.update(
        calls_per_s=round(calls / seconds, 2),
        tokens_per_s=round(calls * batch * length / seconds),
        logits_shape=list(logits.shape),
        finite=bool(torch.isfinite(logits.float()[:1, :4]).all()),
        peak_mb=peak_mb(device),
    )
    log(f"  llada: {entry}")
    del model, logits
    reset_peak(device)


# ---------------------------------------------------------------- the report


def markdown(results: dict) -> str:
    env = results["environment"]
    lines = [
        "# GPU check",
        "",
        f"{env.get('gpu', env['device'])}, torch {env['torch']}, python {env['python']}; "
        f"{results.get('elapsed_s')} s in all.",
        "",
    ]
    parts = results["parts"]
    for name, part in parts.items():
        if "skipped" in part or "error" in part:
            lines.append(f"- {name}: {part.get('skipped') or part.get('error')}")
    c = parts.get("correctness", {})
    if c.get("jobs"):
        lines += ["", "## Correctness (violations by the exact judges; texts differing from CPU)",
                  "", "| family | sampler | model | n | violations (of valid) | cpu violations "
                  "| differ | s |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for j in c["jobs"]:
            if "n" in j:
                cells = [j["model"], j["n"], f"{j['violations']} ({j['valid_violations']})",
                         j.get("cpu_violations", j.get("cpu_error")),
                         j.get("texts_differ_from_cpu", "-"), j["seconds"]]  # fmt: skip
            else:
                note = j.get("refused") or j.get("error") or j.get("skipped")
                cells = [j.get("model", "-"), "-", str(note)[:80], "", "", ""]
            lines.append(
                f"| {j['family']} | {j['sampler']} | " + " | ".join(map(str, cells)) + " |"
            )
        lines += ["", f"Summary: {c.get('summary')}"]
    for name, unit in (("dit", "steps_per_s"), ("molecules", "molecules_per_s")):
        part = parts.get(name, {})
        if part.get("arms"):
            about = {k: v for k, v in part.items() if k not in ("arms", "traceback")}
            lines += ["", f"## {name}", "", f"{about}", "",
                      f"| arm | {unit} | overhead x | violations | peak MB | s |",
                      "|---|---|---|---|---|---|"]  # fmt: skip
            for arm, row in part["arms"].items():
                if "seconds" in row:
                    cells = [row.get(unit), row.get("overhead_x", "-"), row["violations"],
                             row["peak_mb"], row["seconds"]]  # fmt: skip
                else:
                    cells = [row.get("error") or row.get("skipped"), "", "", "", ""]
                lines.append(f"| {arm} | " + " | ".join(map(str, cells)) + " |")
    part = parts.get("llada", {})
    if "calls_per_s" in part:
        lines += ["", "## LLaDA-8B shape (forward passes, random bf16 weights)", "",
                  f"{ {k: v for k, v in part.items() if k != 'traceback'} }"]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", required=True, help="folder for gpu_check.json and .md")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a CPU test run)")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds for the check")
    parser.add_argument(
        "--reserve",
        type=float,
        default=None,
        help="seconds kept for later parts (default: budget / 6)",
    )
    parser.add_argument(
        "--correctness-budget",
        type=float,
        default=None,
        help="seconds the correctness part may use (default: budget / 2)",
    )
    parser.add_argument("--n", type=int, default=None, help="records per correctness job")
    parser.add_argument("--steps", type=int, default=None, help="steps per correctness job")
    parser.add_argument("--length", type=int, default=None, help="tokens per text job")
    parser.add_argument("--dit-steps", type=int, default=16)
    parser.add_argument("--molecule-batches", type=int, default=2)
    parser.add_argument("--no-llada", action="store_true")
    parser.add_argument("--parts", default="correctness,dit,molecules,llada")
    args = parser.parse_args()
    args.n = args.n or (2 if args.quick else 3)
    args.steps = args.steps or 8
    args.length = args.length or (16 if args.quick else 24)
    args.reserve = args.budget / 6 if args.reserve is None else args.reserve
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no GPU")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach a hub
    check = Check(args)
    log(f"gpu_check: {check.results['environment']}")
    wanted = set(args.parts.split(","))
    if "correctness" in wanted:
        total = args.budget
        args.budget = (
            (time.perf_counter() - START) + (args.correctness_budget or 0.5 * total) + args.reserve
        )  # correctness stops `reserve` before its own share runs out
        check.part("correctness", lambda e: correctness(check, e))
        args.budget = total
    if "dit" in wanted:
        check.part("dit", lambda e: dit(check, e), need=args.reserve)
    if "molecules" in wanted:
        check.part("molecules", lambda e: molecules(check, e), need=args.reserve / 2)
    if "llada" in wanted and not args.no_llada:
        check.part("llada", lambda e: llada(check, e), need=args.reserve / 4)
    log(f"results: {check.out / 'gpu_check.json'} and gpu_check.md")


if __name__ == "__main__":
    main()
