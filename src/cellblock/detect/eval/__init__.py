"""Evaluation harness for the collusion detectors: a seeded generator of labelled
multi-agent corpora (honest work plus colluding episodes over every channel) and the
scoring behind ``cellblock eval-detectors``."""

from cellblock.detect.eval.corpus import Corpus, Episode, generate
from cellblock.detect.eval.harness import (
    MAX_FPR,
    STRUCTURAL_TPR,
    ChannelScore,
    EvalReport,
    evaluate,
    score,
)

__all__ = ["MAX_FPR", "STRUCTURAL_TPR", "ChannelScore", "Corpus", "Episode", "EvalReport",
           "evaluate", "generate", "score"]
