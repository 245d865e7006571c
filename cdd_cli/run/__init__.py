"""The run, written once: spec -> constraints -> sampler(model, projection) -> records.

- `drawing.py`: the `BatchDrawer`: one batch drawn through the sampler and the method's
  projection, judged, and redrawn while the method allows;
- `domains.py`: what differs between molecules and text (one small object each);
- `record.py`: the record schema;
- `defaults.py`: the settings a spec leaves to the method and model, filled once;
- `runner.py`: a compiled spec (model loaded, constraints built), its runs, their records and
  writing.

Nothing here calls back up: the API (`api.py`) drives a run, the CLI drives the API.
"""
