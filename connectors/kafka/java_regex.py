"""subscribePattern is a Java regular expression (java.util.regex), as in
Spark's Kafka source; Python's ``re`` reads most of it the same way. This
module rewrites the parts it reads differently or not at all, so that a
pattern copied from a Spark job selects the same topics:

- ``\\p{Alpha}``, ``\\p{XDigit}`` ... (Java's POSIX classes) and their
  negations ``\\P{...}``, outside and inside ``[...]``;
- ``\\Q...\\E`` (a quoted literal);
- ``[a-z&&[^x]]`` (class intersection) is refused with a clear error:
  ``re`` would read ``&&[`` as literal characters and match other topics.

Possessive quantifiers (``a++``) and atomic groups mean the same in Java and
in Python >= 3.11.
"""

from __future__ import annotations

import re

#: Java's POSIX character classes (US-ASCII only, as java.util.regex without
#: UNICODE_CHARACTER_CLASS), as the inside of a Python character class.
POSIX = {
    "Lower": "a-z",
    "Upper": "A-Z",
    "ASCII": r"\x00-\x7f",
    "Alpha": "a-zA-Z",
    "Digit": "0-9",
    "Alnum": "a-zA-Z0-9",
    "Punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~").replace("\\ ", " "),
    "Blank": r" \t",
    "Cntrl": r"\x00-\x1f\x7f",
    "XDigit": "0-9a-fA-F",
    "Space": r" \t\n\x0b\f\r",
}
POSIX["Graph"] = POSIX["Alnum"] + POSIX["Punct"]
POSIX["Print"] = POSIX["Graph"] + " "


class JavaRegexError(ValueError):
    """A Java regular expression eoskit cannot read as Java does."""


def to_python(pattern: str) -> str:
    """The Python ``re`` pattern that matches what the Java pattern matches."""
    out: list[str] = []
    i, depth = 0, 0  # depth: nesting of [...] (Java allows classes in classes)
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            n = pattern[i + 1]
            if n in "pP" and i + 2 < len(pattern) and pattern[i + 2] == "{":
                end = pattern.find("}", i + 3)
                name = pattern[i + 3:end] if end > 0 else ""
                name = name[2:] if name.startswith("Is") and name[2:] in POSIX else name
                if name not in POSIX:
                    raise JavaRegexError(
                        f"\\{n}{{{name}}} is not supported; use one of "
                        f"{', '.join(sorted(POSIX))} or a character class")
                if n == "p":
                    out.append(POSIX[name] if depth else f"[{POSIX[name]}]")
                elif depth:
                    raise JavaRegexError(
                        f"\\P{{{name}}} inside [...] is not supported; write the class out")
                else:
                    out.append(f"[^{POSIX[name]}]")
                i = end + 1
                continue
            if n == "Q":
                end = pattern.find("\\E", i + 2)
                literal = pattern[i + 2:] if end < 0 else pattern[i + 2:end]
                out.append(re.escape(literal))
                i = len(pattern) if end < 0 else end + 2
                continue
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[":
            if depth and pattern.startswith("[^", i):
                raise JavaRegexError("a negated class inside [...] is not supported; write the class out")
            depth += 1
            out.append(c if depth == 1 else "")  # [a-z[0-9]] is the union [a-z0-9]
            i += 1
            continue
        if depth and c == "]" and not (pattern[i - 1] == "[" or pattern[i - 2:i] == "[^"):
            depth -= 1
            out.append(c if depth == 0 else "")
            i += 1
            continue
        if depth and pattern.startswith("&&", i):
            raise JavaRegexError(
                "character-class intersection (&&) is not supported; write the class out")
        out.append(c)
        i += 1
    return "".join(out)
