"""Find the final answer a response commits to: its last `\\boxed{...}` (balanced braces) or its last `#### ...`."""

from __future__ import annotations

# `\fbox{}` is the plain-TeX spelling some models (and a few MATH solutions) use for the same thing.
_BOX_COMMANDS = ("\\boxed", "\\fbox")


def _last_box_command(text: str) -> tuple[int, int] | None:
    """(start, end) of the last box command that is followed (after optional spaces) by `{`."""
    best: tuple[int, int] | None = None
    for command in _BOX_COMMANDS:
        search_end = len(text)
        while True:
            start = text.rfind(command, 0, search_end)
            if start < 0:
                break
            end = start + len(command)
            # `\boxedx` is another command, not a box; skip it.
            if end < len(text) and text[end].isalpha():
                search_end = start
                continue
            if best is None or start > best[0]:
                best = (start, end)
            break
    return best


def extract_last_boxed(text: str) -> str | None:
    """Content of the LAST `\\boxed{...}` in `text`, braces balanced; None when there is none or it never closes.

    An empty box returns "" (callers treat it as no answer). Escaped braces `\\{`, `\\}` inside the box are content,
    not delimiters, so `\\boxed{\\{1,2\\}}` gives `\\{1,2\\}`.
    """
    found = _last_box_command(text)
    if found is None:
        return None
    position = found[1]
    while position < len(text) and text[position] == " ":
        position += 1
    if position >= len(text) or text[position] != "{":
        return None
    depth = 0
    content_start = position + 1
    index = position
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2  # an escaped character (`\{`, `\}`, `\\`) never opens or closes the box
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[content_start:index]
        index += 1
    return None


def extract_after_last_hashes(text: str) -> str | None:
    """The rest of the line after the LAST `####` (GSM8K's answer marker), stripped; None when there is none."""
    marker = text.rfind("####")
    if marker < 0:
        return None
    rest = text[marker + 4 :]
    return rest.split("\n", 1)[0].strip()


def final_answer_candidate(text: str) -> str | None:
    """The answer a GSM8K-style response commits to: whichever of its last box / last `####` comes LAST."""
    box = _last_box_command(text)
    marker = text.rfind("####")
    if box is not None and box[0] > marker:
        return extract_last_boxed(text)
    if marker >= 0:
        return extract_after_last_hashes(text)
    return None
