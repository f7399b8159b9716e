"""String normalisation of final answers: cheap, meaning-preserving rewrites used as a fast path before math-verify.

Equality after `normalize_math_answer` is a sound "correct" verdict (every rewrite keeps the value); inequality
decides nothing and the pair goes on to the symbolic check. Every pattern here is linear-time (no nested
quantifiers), so running it in the caller's process on untrusted text is safe.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

# Wrappers whose content is the answer (`\text{(C)}` == `(C)`); only brace-free content, so this stays linear.
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![a-zA-Z])")
_FRAC_VARIANTS = re.compile(r"\\[dt]frac(?![a-zA-Z])")
_SHORT_FRAC = re.compile(r"\\frac(\d)(\d)")  # \frac12 -> \frac{1}{2}
_SPACING = re.compile(r"\\[!,;: ]|~")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|°|\\degree")
_WHITESPACE = re.compile(r"\s+")

# Answers longer than this skip the fast path (they go straight to the bounded symbolic check).
MAX_FAST_PATH_CHARS = 1000
# Longer candidates are not numbers anyone means; refusing them keeps number parsing trivially bounded.
MAX_NUMBER_CHARS = 64


def normalize_math_answer(answer: str) -> str:
    """A canonical spelling of a MATH-style answer: no `$`, `\\left`/`\\right`, spacing, `\\text{}`, degree marks or spaces."""
    text = answer.strip()
    text = text.strip("$")
    text = _TEXT_WRAPPER.sub(r"\1", text)
    text = _LEFT_RIGHT.sub("", text)
    text = _FRAC_VARIANTS.sub(r"\\frac", text)
    text = _SHORT_FRAC.sub(r"\\frac{\1}{\2}", text)
    text = _SPACING.sub("", text)
    text = _DEGREES.sub("", text)
    text = _WHITESPACE.sub("", text)
    if text.startswith("\\$"):
        text = text[2:]
    return text.rstrip(".")


def math_strings_equal(predicted: str, gold: str) -> bool:
    """True when both answers have the same normalised spelling (sound, incomplete: False means 'not decided')."""
    if len(predicted) > MAX_FAST_PATH_CHARS or len(gold) > MAX_FAST_PATH_CHARS:
        return False
    normalized = normalize_math_answer(predicted)
    return bool(normalized) and normalized == normalize_math_answer(gold)


# A rational literal as MATH answers spell them: `-12`, `0.75`, `\\frac{3}{4}` (after normalisation), `3/4`.
_INTEGER = re.compile(r"[-+]?\d+")
_DECIMAL = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+)")
# math-verify rounds decimals to 6 places before comparing; a larger gap can never round away.
_DECIMAL_TOLERANCE = Fraction(1, 10**6)
_FRACTION = re.compile(r"([-+]?)(?:\\frac\{(\d+)\}\{(\d+)\}|(\d+)/(\d+))")


def rational_literal(answer: str) -> Fraction | None:
    """Exact value of an answer that is a plain integer, decimal or fraction of integers; None for anything else."""
    text = normalize_math_answer(answer) if len(answer) <= MAX_FAST_PATH_CHARS else ""
    if not text or len(text) > MAX_NUMBER_CHARS:
        return None
    if _INTEGER.fullmatch(text) or _DECIMAL.fullmatch(text):
        return Fraction(text)
    match = _FRACTION.fullmatch(text)
    if match is None:
        return None
    sign, numerator, denominator = (
        match.group(1),
        match.group(2) or match.group(4),
        match.group(3) or match.group(5),
    )
    if int(denominator) == 0:
        return None
    value = Fraction(int(numerator), int(denominator))
    return -value if sign == "-" else value


def numeric_verdict(predicted: str, gold: str) -> bool | None:
    """Exact verdict when both answers are rational literals, mirroring math-verify's number rules.

    Equal values -> True. Integers and fractions compare exactly -> False when they differ. When a decimal is
    involved math-verify compares after rounding to 6 places, so only a gap above 1e-6 is a sure False; closer
    pairs (`0.333333` vs `\\frac13`) stay undecided (None) for math-verify itself.
    """
    predicted_value, gold_value = rational_literal(predicted), rational_literal(gold)
    if predicted_value is None or gold_value is None:
        return None
    if predicted_value == gold_value:
        return True
    if "." not in predicted and "." not in gold:
        return False
    if abs(predicted_value - gold_value) > _DECIMAL_TOLERANCE:
        return False
    return None


# A plain decimal number, optionally signed; no exponents, so comparing two of them is linear in their length.
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")


def parse_plain_number(text: str) -> Decimal | None:
    """The value of a GSM8K-style number: commas, a leading `$`/`\\$` and spaces around it ignored; None if not one."""
    candidate = text.strip()
    if len(candidate) > MAX_NUMBER_CHARS * 2:
        return None
    candidate = candidate.replace("{,}", "").replace(",", "")
    sign = ""
    if candidate and candidate[0] in "-+":
        sign, candidate = candidate[0], candidate[1:].lstrip()
    if candidate.startswith("\\$"):
        candidate = candidate[2:]
    elif candidate.startswith("$"):
        candidate = candidate[1:]
    candidate = sign + candidate.strip()
    if len(candidate) > MAX_NUMBER_CHARS or not _PLAIN_NUMBER.fullmatch(candidate):
        return None
    try:
        return Decimal(candidate)
    except InvalidOperation:  # unreachable for a regex-checked string; kept so bad input can never raise
        return None
