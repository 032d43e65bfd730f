"""Answer extraction (completion -> answer string) and grading (answer vs reference -> bool).

Extractors (``task.extract``):
- ``boxed``: the content of the last ``\\boxed{...}`` (nested braces balanced).
- ``hash``: the text after the last ``####`` on its line (GSM8K's reference format).
- ``last_number``: the last number in the completion (``-1,234.5`` -> ``-1234.5``; ``3/4`` kept).
- ``answer_tag``: the content of the last ``<answer>...</answer>`` (reasoning-gym's convention).
- ``regex``: group 1 (or the whole match) of the last match of ``task.regex``.
- ``none``: the whole completion, stripped (exact-match datasets).
An extractor returns None when the completion holds no answer in its format.

Detail: docs/runs.md, "grpolab.tasks.answers".
"""

from __future__ import annotations

import re
from fractions import Fraction

from grpolab.errors import ConfigError

EXTRACTORS = ("boxed", "hash", "last_number", "answer_tag", "regex", "none")
GRADERS = ("math", "numeric", "exact", "task")
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}``, braces balanced; None if absent or unclosed."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j].strip()
    return None


def after_hashes(text: str) -> str | None:
    if "####" not in text:
        return None
    value = text.rsplit("####", 1)[1].strip().splitlines()
    return value[0].strip() if value and value[0].strip() else None


def last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def answer_tag(text: str) -> str | None:
    found = _ANSWER_TAG.findall(text)
    return found[-1].strip() if found else None


def make_extractor(kind: str, pattern: str | None = None):
    """A function completion -> answer or None; bad settings raise ConfigError naming the key."""
    if kind not in EXTRACTORS:
        raise ConfigError(f"task.extract: unknown extractor {kind!r}; valid: {', '.join(EXTRACTORS)}")
    if (kind == "regex") != (pattern is not None):
        raise ConfigError("task.regex: give a pattern exactly when task.extract is regex")
    if kind == "regex":
        try:
            compiled = re.compile(pattern, re.DOTALL)
        except re.error as exc:
            raise ConfigError(f"task.regex: {pattern!r} is not a valid regular expression: {exc}") from None

        def by_regex(text: str) -> str | None:
            matches = list(compiled.finditer(text))
            if not matches:
                return None
            m = matches[-1]
            return (m.group(1) if compiled.groups else m.group(0)).strip()
        return by_regex
    if kind == "none":
        return lambda text: text.strip()
    return {"boxed": last_boxed, "hash": after_hashes, "last_number": last_number, "answer_tag": answer_tag}[kind]


def parse_number(text: str) -> float | None:
    text = text.strip().replace(",", "").rstrip(".")
    try:
        return float(Fraction(text)) if "/" in text else float(text)
    except (ValueError, ZeroDivisionError):
        return None


def math_equal(reference: str, answer: str) -> bool:
    """math-verify equivalence of two answer strings. Bare answers are wrapped in ``$...$`` so
    LaTeX without delimiters (``\\frac{1}{2}``) parses; a parse that fails counts as wrong."""
    from math_verify import parse, verify

    def parsed(text: str):
        return parse(text if "$" in text or "\\boxed" in text else f"${text}$")
    gold, pred = parsed(reference), parsed(answer)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred))


def make_grader(kind: str, tolerance: float = 1e-6):
    """A function (reference, answer) -> bool for the string graders; ``task`` is the source's."""
    if kind not in GRADERS:
        raise ConfigError(f"task.grade: unknown grader {kind!r}; valid: {', '.join(GRADERS)}")
    if not tolerance >= 0:
        raise ConfigError(f"task.tolerance: must be >= 0, got {tolerance!r}")
    if kind == "math":
        return math_equal
    if kind == "exact":
        return lambda reference, answer: answer.strip() == reference.strip()
    if kind == "numeric":
        def numeric_equal(reference: str, answer: str) -> bool:
            x, y = parse_number(reference), parse_number(answer)
            return x is not None and y is not None and abs(x - y) <= tolerance
        return numeric_equal
    return None  # "task": graded by the source
