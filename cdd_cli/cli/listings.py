"""`cdd constraints ls` and `cdd models ls`: tab-separated tables for people, `--json` for
scripts."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cdd_cli.cli.guard import run_guarded
from cdd_cli.cli.options import JsonOpt
from cdd_cli.constraints.surrogates import SHIPPED_SURROGATES
from cdd_cli.models.checkpoint import read_config
from cdd_cli.models.registry import shipped_models
from cdd_cli.spec.entries import constraint_rows


def constraints_ls(as_json: JsonOpt = False) -> None:
    """List the constraint types, built in and from installed plugins: domain, keys
    (? = optional), tau's range, source and what each means; a broken plugin is one line
    saying why."""
    run_guarded(lambda: list_constraints(as_json))


def list_constraints(as_json: bool) -> None:
    rows = constraint_rows()
    if as_json:
        typer.echo(json.dumps(rows))
        return
    typer.echo("type\tdomain\tkeys\ttau\tsource\tdescription")
    for row in rows:
        if "broken" in row:
            typer.echo(f"{row['type']}\tbroken\t{row['source']}: {row['broken']}")
            continue
        keys = ", ".join(f"{k}{'' if v['required'] else '?'}" for k, v in row["keys"].items())
        bounds = row["tau_range"]
        tau = f"[{bounds[0]:g}, {bounds[1]:g}]" if bounds else ""
        fields = (row["type"], row["domain"], keys, tau, row["source"], row["description"])
        typer.echo("\t".join(fields))


def shipped_surrogates() -> list[Path]:
    """The shipped surrogate folders: the constraints' defaults, then those a shipped model's
    config names as its own (`surrogates: {kind: FOLDER}`, relative to the model's folder)."""
    folders = list(SHIPPED_SURROGATES.values())
    for _, directory in shipped_models():
        named = read_config(directory)[1].get("surrogates")
        if isinstance(named, dict):
            folders += [(directory / folder).resolve() for folder in named.values()]
    return list(dict.fromkeys(folders))


def models_ls(as_json: JsonOpt = False) -> None:
    """List the shipped default models and surrogates: name, kind, size, folder."""

    def body() -> None:
        rows = []
        for name, directory in shipped_models():
            weights = directory / "model.safetensors"
            rows.append((name, "diffusion model", weights, directory))
        for folder in shipped_surrogates():
            rows.append((folder.name, "surrogate", folder / "model.safetensors", folder))
        listed = [
            {
                "name": name,
                "kind": kind,
                "megabytes": round(weights.stat().st_size / 1e6, 1) if weights.is_file() else None,
                "folder": str(directory),
            }
            for name, kind, weights, directory in rows
        ]
        if as_json:
            typer.echo(json.dumps(listed))
            return
        typer.echo("name\tkind\tMB\tfolder")
        for row in listed:
            size = "missing" if row["megabytes"] is None else f"{row['megabytes']:g}"
            typer.echo(f"{row['name']}\t{row['kind']}\t{size}\t{row['folder']}")

    run_guarded(body)
