"""GSM8K grading: the response's final answer (last `\\boxed{}` or last `####`) must equal the gold number."""

from __future__ import annotations

from marin_rl.verifiers.boxed import final_answer_candidate
from marin_rl.verifiers.normalize import parse_plain_number


def gsm8k_gold_number(reference_answer: str) -> str:
    """The gold number of a GSM8K `answer` field: the text after its last `####`."""
    marker = reference_answer.rfind("####")
    if marker < 0:
        raise ValueError(f"GSM8K answer has no '####' marker: {reference_answer[-80:]!r}")
    return reference_answer[marker + 4 :].strip()


def gsm8k_correct(response: str, gold: str) -> bool:
    """True iff the response's final answer is numerically equal to `gold`.

    The final answer is the content of the LAST `\\boxed{}` or the line after the LAST `####`, whichever comes
    later; commas, a leading `$` and trailing zeros after the decimal point are ignored. A number merely mentioned
    elsewhere earns nothing (substring credit is gameable by listing numbers). Pure string work, linear in the
    response length and bounded by `MAX_NUMBER_CHARS` for the comparison, so it needs no timeout of its own.
    """
    gold_value = parse_plain_number(gold)
    if gold_value is None:
        raise ValueError(f"GSM8K gold answer is not a plain number: {gold!r}")
    candidate = final_answer_candidate(response)
    if candidate is None:
        return False
    value = parse_plain_number(candidate)
    return value is not None and value == gold_value


def gsm8k_format_ok(response: str) -> bool:
    """The response commits to a final answer (box or `####`) that is a plain number."""
    candidate = final_answer_candidate(response)
    return candidate is not None and parse_plain_number(candidate) is not None
