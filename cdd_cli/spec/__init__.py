"""A spec: what to sample and how, as plain data, checked before any sampling.

    model: default-molecules
    constraints:
      - type: sa
        tau: 3.5
    projection: {eta: 1.0, inner_iters: 100, ...}
    sampling: {steps: 32, batch_size: 256, seed: 0, n: 1024}
    method: cdd

- `model.py`: the `Spec` (its settings are `settings.py`'s dataclasses), its resolved plain
  data, and the check of a whole spec;
- `entries.py`: constraint entries, validated generically over the constraint table;
- `values.py`: the one check of an option's or a setting's type;
- `reader.py`: the YAML file read with its file:line in every error, within limits;
- `overlay.py`: what flags or an API call give laid over a spec, checked as the spec is.
"""
