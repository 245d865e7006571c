"""Peak memory per sample with a full-size vocabulary: unconstrained vs constrained sampling.

A published family's vocabulary is 126k (LLaDA) to 152k (Qwen/Dream) tokens, so every
[B, L, V] float32 tensor at L = 256 is 150 MB a sample. The projection must keep a bounded
number of them. This builds an A2D (Qwen3 layout) directory with tiny layers and a
152,064-row embedding: GPT-2's byte-level BPE (50,257 tokens) padded with added tokens to
Qwen2.5's 151,665, plus the mask, so lexical and pattern constraints read a real
vocabulary at the real size. Each arm runs in its own process; its peak resident memory
while sampling is measured from Linux's high-water mark (reset after loading through
/proc/self/clear_refs), and the table divides the rise over the loaded process by the batch.

    OMP_NUM_THREADS=1 python bench/family_memory.py --batch-size 2 \
        --out bench/results/family_memory_2026-11-26
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENS = 151_665  # Qwen2.5's tokenizer, added tokens included
ROWS = 152_064  # Qwen2.5's (and Dream's) embedding rows

ARMS = {
    "unconstrained": None,
    "word_count + include + exclude": (
        "constraints:\n  - type: word_count\n    min: 20\n    max: 40\n"
        "  - type: include\n    words: [harbor, lantern]\n"
        "  - type: exclude\n    words: [the]\n"
    ),
    "regex (ISO date, then text)": (
        "constraints:\n  - type: regex\n    pattern: '[0-9]{4}-[0-9]{2}-[0-9]{2}: [a-z ]{1,200}'\n"
    ),
}


def build(folder: Path) -> Path:
    """The directory: tiny Qwen3-layout layers over a Qwen-sized vocabulary."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import AddedToken, ByteLevelBPETokenizer

    assets = ROOT / "cdd_cli" / "assets" / "gpt2-tokenizer"
    tokenizer = ByteLevelBPETokenizer(str(assets / "vocab.json"), str(assets / "merges.txt"))
    padding = [AddedToken(f"<|pad_{k}|>", special=True) for k in range(TOKENS - 50257)]
    tokenizer.add_special_tokens(padding)
    tokenizer.add_special_tokens([AddedToken("<|mask|>", special=True)])
    mask_id = tokenizer.token_to_id("<|mask|>")
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    hidden, ffn, layers, heads, head_dim = 64, 128, 2, 4, 16
    config = {
        "model_type": "a2d-qwen3",
        "vocab_size": ROWS,
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": 2,
        "head_dim": head_dim,
        "rope_theta": 1e6,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "max_position_embeddings": 1024,
        "eos_token_id": 50256,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    torch.manual_seed(0)
    state = {"model.embed_tokens.weight": torch.randn(ROWS, hidden) * 0.5}
    state["model.norm.weight"] = torch.ones(hidden)
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes = {
            "self_attn.q_proj.weight": (heads * head_dim, hidden),
            "self_attn.k_proj.weight": (2 * head_dim, hidden),
            "self_attn.v_proj.weight": (2 * head_dim, hidden),
            "self_attn.o_proj.weight": (hidden, heads * head_dim),
            "mlp.gate_proj.weight": (ffn, hidden),
            "mlp.up_proj.weight": (ffn, hidden),
            "mlp.down_proj.weight": (hidden, ffn),
        }
        for name, shape in shapes.items():
            state[p + name] = torch.randn(shape) * 0.1
        for name in ("input_layernorm", "post_attention_layernorm"):
            state[p + name + ".weight"] = torch.ones(hidden)
        for name in ("self_attn.q_norm", "self_attn.k_norm"):
            state[p + name + ".weight"] = torch.ones(head_dim)
    state = {k: v.to(torch.bfloat16) for k, v in state.items()}
    save_file(state, str(folder / "model.safetensors"))
    assert mask_id == TOKENS, mask_id
    return folder


MEASURE = r"""
import json, sys, time
from pathlib import Path
from cdd_cli.api import Generator
from cdd_cli.run.runner import plan
from cdd_cli.spec.model import Spec
from cdd_cli.spec.reader import load_spec

model, spec_file, batch, length, steps = sys.argv[1:6]
spec = load_spec(Path(spec_file)) if spec_file != "-" else Spec()
spec.model = model
spec.sampling.steps, spec.sampling.batch_size = int(steps), int(batch)

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

generator = Generator(spec=spec, domain="text", device="cpu")
run = plan(generator.compiled, int(batch), None, int(length))
loaded = rss("VmRSS:")
open("/proc/self/clear_refs", "w").write("5")  # the high-water mark restarts here
started = time.perf_counter()
records = list(run.records())
seconds = time.perf_counter() - started
print(json.dumps({
    "loaded": loaded, "peak": rss("VmHWM:"), "seconds": seconds,
    "satisfied": [r["satisfied"] for r in records],
}))
"""


def measure(folder: Path, spec: str | None, batch: int, length: int, steps: int) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(spec or "constraints: []\n")
    args = [sys.executable, "-c", MEASURE, str(folder), f.name if spec else "-"]
    args += [str(batch), str(length), str(steps)]
    out = subprocess.run(args, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def satisfied(flags: list) -> str:
    return "-" if None in flags else f"{sum(flags)}/{len(flags)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "cdd-q152k")
    args = parser.parse_args()
    folder = args.model_dir
    if not (folder / "model.safetensors").is_file():
        build(folder)
    mib = 1 << 20
    rows = []
    base = None
    for name, spec in ARMS.items():
        result = measure(folder, spec, args.batch_size, args.length, args.steps)
        per_sample = (result["peak"] - result["loaded"]) / args.batch_size / mib
        base = per_sample if base is None else base
        rows.append(
            f"| {name} | {per_sample:,.0f} | {per_sample / base:.2f}x | "
            f"{result['seconds']:.1f} | {satisfied(result['satisfied'])} |"
        )
        print(rows[-1], flush=True)
    table = "\n".join(
        [
            f"V = {TOKENS:,} tokens ({ROWS:,} embedding rows), L = {args.length}, batch "
            f"{args.batch_size}, {args.steps} steps, tiny layers (hidden 64)",
            "",
            "| arm | peak MiB per sample while sampling | vs unconstrained | seconds | satisfied |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
