"""The MOSES benchmark's published baseline rows, as plain data, for tables beside cdd's own.

BASELINES is the metrics table of the molecularsets/moses README (github.com/molecularsets/
moses, README.md, "Metrics") as of commit 7b8f83b21a9b7ded493349ec8ef292384ce2bb52
(2020-10-28, "Updated results for JTN-VAE (added std)"; unchanged to the last commit, dd7ed6a
of 2023-06-22): each value a (mean, standard deviation) over several seeds, the standard
deviation None where the README gives none (the Train row: the training set scored as a
sample). These are the metrics `molsets==0.3.1` computes, as `cdd eval --moses` does
(evaluate/moses.py), keyed as `moses_metrics` keys them.

EARLY_BASELINES is the README's first table (commit 2b613a077d54cc357c591c3ddebe4efcd0cf2b28,
2019-02-11, "FCD from fcd_torch"), the source of numbers often quoted (CharRNN FCD/Test 0.323,
JTN-VAE 4.377): computed before the metrics were revised (SNN, IntDiv2 and Novelty were not
yet in it), so they compare with neither cdd's numbers nor BASELINES; kept so that a quote of
them can be traced, never shown as a current baseline.
"""

from __future__ import annotations

SOURCE = (
    "MOSES (Polykovskiy et al., Frontiers in Pharmacology 2020), the metrics table of "
    "github.com/molecularsets/moses README.md at commit 7b8f83b (2020-10-28): mean ± std "
    "over several seeds"
)
EARLY_SOURCE = (
    "github.com/molecularsets/moses README.md at commit 2b613a0 (2019-02-11), before the "
    "metrics were revised: not comparable with SOURCE's rows"
)

# The README's columns in its order, named as `cdd eval --moses` names them.
METRICS = (
    "valid", "unique@1000", "unique@10000", "FCD/Test", "FCD/TestSF", "SNN/Test", "SNN/TestSF",
    "Frag/Test", "Frag/TestSF", "Scaf/Test", "Scaf/TestSF", "IntDiv", "IntDiv2", "Filters",
    "Novelty",
)  # fmt: skip
# Lower is better for these; higher for every other metric of METRICS.
LOWER_IS_BETTER = frozenset({"FCD/Test", "FCD/TestSF"})

_TRAIN = (1.0, 1.0, 1.0, 0.008, 0.4755, 0.6419, 0.5859, 1.0, 0.9986, 0.9907, 0.0, 0.8567, 0.8508,
          1.0, 1.0)  # fmt: skip
# Model -> (mean, std) per METRICS column, as the README prints them.
_ROWS = {
    "HMM": (
        (0.076, 0.0322), (0.623, 0.1224), (0.5671, 0.1424), (24.4661, 2.5251), (25.4312, 2.5599),
        (0.3876, 0.0107), (0.3795, 0.0107), (0.5754, 0.1224), (0.5681, 0.1218), (0.2065, 0.0481),
        (0.049, 0.018), (0.8466, 0.0403), (0.8104, 0.0507), (0.9024, 0.0489), (0.9994, 0.001),
    ),
    "NGram": (
        (0.2376, 0.0025), (0.974, 0.0108), (0.9217, 0.0019), (5.5069, 0.1027), (6.2306, 0.0966),
        (0.5209, 0.001), (0.4997, 0.0005), (0.9846, 0.0012), (0.9815, 0.0012), (0.5302, 0.0163),
        (0.0977, 0.0142), (0.8738, 0.0002), (0.8644, 0.0002), (0.9582, 0.001), (0.9694, 0.001),
    ),
    "Combinatorial": (
        (1.0, 0.0), (0.9983, 0.0015), (0.9909, 0.0009), (4.2375, 0.037), (4.5113, 0.0274),
        (0.4514, 0.0003), (0.4388, 0.0002), (0.9912, 0.0004), (0.9904, 0.0003), (0.4445, 0.0056),
        (0.0865, 0.0027), (0.8732, 0.0002), (0.8666, 0.0002), (0.9557, 0.0018), (0.9878, 0.0008),
    ),
    "CharRNN": (
        (0.9748, 0.0264), (1.0, 0.0), (0.9994, 0.0003), (0.0732, 0.0247), (0.5204, 0.0379),
        (0.6015, 0.0206), (0.5649, 0.0142), (0.9998, 0.0002), (0.9983, 0.0003), (0.9242, 0.0058),
        (0.1101, 0.0081), (0.8562, 0.0005), (0.8503, 0.0005), (0.9943, 0.0034), (0.8419, 0.0509),
    ),
    "AAE": (
        (0.9368, 0.0341), (1.0, 0.0), (0.9973, 0.002), (0.5555, 0.2033), (1.0572, 0.2375),
        (0.6081, 0.0043), (0.5677, 0.0045), (0.991, 0.0051), (0.9905, 0.0039), (0.9022, 0.0375),
        (0.0789, 0.009), (0.8557, 0.0031), (0.8499, 0.003), (0.996, 0.0006), (0.7931, 0.0285),
    ),
    "VAE": (
        (0.9767, 0.0012), (1.0, 0.0), (0.9984, 0.0005), (0.099, 0.0125), (0.567, 0.0338),
        (0.6257, 0.0005), (0.5783, 0.0008), (0.9994, 0.0001), (0.9984, 0.0003), (0.9386, 0.0021),
        (0.0588, 0.0095), (0.8558, 0.0004), (0.8498, 0.0004), (0.997, 0.0002), (0.6949, 0.0069),
    ),
    "JTN-VAE": (
        (1.0, 0.0), (1.0, 0.0), (0.9996, 0.0003), (0.3954, 0.0234), (0.9382, 0.0531),
        (0.5477, 0.0076), (0.5194, 0.007), (0.9965, 0.0003), (0.9947, 0.0002), (0.8964, 0.0039),
        (0.1009, 0.0105), (0.8551, 0.0034), (0.8493, 0.0035), (0.976, 0.0016), (0.9143, 0.0058),
    ),
    "LatentGAN": (
        (0.8966, 0.0029), (1.0, 0.0), (0.9968, 0.0002), (0.2968, 0.0087), (0.8281, 0.0117),
        (0.5371, 0.0004), (0.5132, 0.0002), (0.9986, 0.0004), (0.9972, 0.0007), (0.8867, 0.0009),
        (0.1072, 0.0098), (0.8565, 0.0007), (0.8505, 0.0006), (0.9735, 0.0006), (0.9498, 0.0006),
    ),
}
BASELINES: dict[str, dict[str, tuple[float, float | None]]] = {
    "Train": {m: (v, None) for m, v in zip(METRICS, _TRAIN, strict=True)},
    **{model: dict(zip(METRICS, row, strict=True)) for model, row in _ROWS.items()},
}

# The 2019 table's columns: no IntDiv2 or Novelty yet (and its SNN header says lower is better).
EARLY_METRICS = (
    "valid", "unique@1000", "unique@10000", "FCD/Test", "FCD/TestSF", "SNN/Test", "SNN/TestSF",
    "Frag/Test", "Frag/TestSF", "Scaf/Test", "Scaf/TestSF", "IntDiv", "Filters",
)  # fmt: skip
_EARLY_ROWS = {
    "CharRNN": (0.9598, 1.0, 0.9993, 0.3233, 0.8355, 0.4606, 0.4492, 0.9977, 0.9962, 0.7964,
                0.1281, 0.8561, 0.9920),
    "VAE": (0.9528, 1.0, 0.9992, 0.2540, 0.6959, 0.4684, 0.4547, 0.9978, 0.9963, 0.8277, 0.0925,
            0.8548, 0.9925),
    "AAE": (0.9341, 1.0, 1.0, 1.3511, 1.8587, 0.4191, 0.4113, 0.9865, 0.9852, 0.6637, 0.1538,
            0.8531, 0.9759),
    "ORGAN": (0.8731, 0.9910, 0.9260, 1.5748, 2.4306, 0.4745, 0.4593, 0.9897, 0.9883, 0.7843,
              0.0632, 0.8526, 0.9934),
    "JTN-VAE": (1.0, 0.9980, 0.9972, 4.3769, 4.6299, 0.3909, 0.3902, 0.9679, 0.9699, 0.3868,
                0.1163, 0.8495, 0.9566),
}  # fmt: skip
EARLY_BASELINES: dict[str, dict[str, float]] = {
    model: dict(zip(EARLY_METRICS, row, strict=True)) for model, row in _EARLY_ROWS.items()
}
