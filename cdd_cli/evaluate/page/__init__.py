"""`cdd report`: one self-contained HTML page about a run's records (and others beside it).

- `runs.py`: a JSONL file's records, the configuration beside it, the summary's numbers;
- `charts.py`: histograms as hand-written SVG, the Kolmogorov-Smirnov distance;
- `drawing.py`: molecules drawn by RDKit, and the properties plotted beside the recorded ones;
- `sections.py`: the summary, the distributions and a card per record, every string escaped;
- `moses_table.py`: the MOSES metrics `cdd eval --moses` wrote, beside MOSES' baselines;
- `document.py`: the page itself, its style and its one inline script, written whole.
"""
