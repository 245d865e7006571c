"""The full-size mdlm-owt architecture with random weights: parameters, speed and memory.

    python bench/mdlm_owt_scale.py [--device cpu|cuda] [--batch-size 1] [--steps 4]
        [--length 1024] [--dtype float32|bfloat16] [--constraint]

Builds the DiT with kuleshov-group/mdlm-owt's config (V 50,258, d 768, 12 blocks, 12 heads,
length 1024; 169.6M parameters with the untied output layer), then times `--steps` denoising
steps of `cdd generate`'s sampler (one model call each), and with `--constraint` the same
steps with a toxicity projection on every step (a random GPT-2 classifier whose tau no
sample meets, so every step runs the ALM to its iteration cap: a worst case). Reports seconds
per step and peak memory (CUDA: torch.cuda.max_memory_allocated; CPU: max RSS).
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch

from cdd_cli.constraints.toxicity import ToxicityConstraint
from cdd_cli.diffusion.processes import MaskedProcess
from cdd_cli.diffusion.sampler import Sampler, sample_generator
from cdd_cli.methods import CDD_SHARED, METHODS
from cdd_cli.models.checkpoint import ModelConfig
from cdd_cli.models.dit import DiffusionModel
from cdd_cli.models.surrogate import SoftTokenRegressor, SurrogateConfig
from cdd_cli.models.tokenizers import Gpt2Tokenizer
from cdd_cli.projection import engine
from cdd_cli.settings import ALMSettings, SearchSettings


def peak_memory_mb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--constraint", action="store_true")
    args = parser.parse_args()

    config = ModelConfig(
        vocab_size=50258,
        model_length=1024,
        hidden_dim=768,
        cond_dim=128,
        n_blocks=12,
        n_heads=12,
        dropout=0.1,
        time_conditioning=False,
        model_type="mdlm",
        noise="masked",
    )
    dtype = getattr(torch, args.dtype)
    model = DiffusionModel(config).to(args.device, dtype).eval()
    parameters = sum(p.numel() for p in model.parameters())
    process = MaskedProcess(config.vocab_size, 50257)
    sampler = Sampler(model, process, args.steps, time_conditioning=False)
    generators = [sample_generator(0, 0, i) for i in range(args.batch_size)]
    hook = None
    if args.constraint:
        net = SoftTokenRegressor(
            SurrogateConfig(vocab_size=50258, max_length=1024, target="toxicity")
        ).to(args.device)
        net.requires_grad_(False)
        toxicity = ToxicityConstraint(tau=0.0, net=net, tokenizer=Gpt2Tokenizer())
        settings = ALMSettings(
            **CDD_SHARED,
            project_from=0.0,
            max_outer_iters=2,
            inner_iters=10,
            mu_init=1.0,
            support=256,
        )
        job = engine.Job(
            constraints=[toxicity],
            closed_forms=[],
            fixed_positions=process.fixed_positions,
            generators=generators,
            decode=Gpt2Tokenizer().decode,
        )
        hook = METHODS["cdd"].engine(job, settings, SearchSettings(project_from=0.9))
    started = time.perf_counter()
    with torch.inference_mode(hook is None):
        sampler.sample(generators, args.length, hook)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    print(
        json.dumps(
            {
                "parameters": parameters,
                "parameters_millions": round(parameters / 1e6, 1),
                "device": args.device,
                "dtype": args.dtype,
                "batch_size": args.batch_size,
                "length": args.length,
                "steps": args.steps,
                "projected": args.constraint,
                "seconds_per_step": round(elapsed / args.steps, 3),
                "peak_memory_mb": round(peak_memory_mb(args.device)),
                "threads": torch.get_num_threads(),
            }
        )
    )


if __name__ == "__main__":
    main()
