"""What the stored rows say: the tidy frame, ablation tables as data, claims, paired verdicts and
their statistics (inference, coverage), run histories, seeds on demand and compute-scaling fits."""

DIRECTIONS = ("increase", "decrease", "none")   # a verdict's direction; here so that reading a claim loads no statistics
