"""Java's JAAS configuration syntax, as Kafka's ``JaasConfig`` reads a
``sasl.jaas.config`` value: the login module and its options
(:func:`parse_jaas`). Runs where the options are parsed (the driver);
raising :class:`OptionError` refuses the option, whose text (it holds
a password) no error ever quotes."""

from __future__ import annotations

from eoskit.core.options import OptionError



class _Tokens:
    """The tokens of ``java.io.StreamTokenizer`` as Kafka's ``JaasConfig``
    sets it up: words (letters, digits, ``. - _ $``), numbers, quoted strings
    in ``"`` or ``'`` with Java's escapes, ``//`` and ``/* */`` comments, and
    every other character on its own."""

    WORD, NUMBER, EOF = "word", "number", "eof"

    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def _alpha(self, c: str) -> bool:
        return c.isascii() and c.isalpha() or c in "_$" or ord(c) >= 160

    def _digit(self, c: str) -> bool:
        return c in "0123456789.-"

    def next(self) -> tuple[str, str | None]:
        """(kind, text): kind is WORD, NUMBER, EOF, a quote character for a
        quoted string, or the ordinary character itself (text None)."""
        text, n = self.text, len(self.text)
        while True:
            while self.pos < n and ord(text[self.pos]) <= 32:
                self.pos += 1
            if self.pos >= n:
                return self.EOF, None
            c = text[self.pos]
            if c == "/":
                if text.startswith("/*", self.pos):
                    end = text.find("*/", self.pos + 2)
                    self.pos = n if end < 0 else end + 2
                    continue
                # "//", and a lone "/" (the tokenizer's default comment character)
                end = min((i for i in (text.find("\n", self.pos), text.find("\r", self.pos)) if i >= 0),
                          default=n)
                self.pos = end
                continue
            break
        start = self.pos
        if self._digit(c):
            if c == "-" and not (self.pos + 1 < n and text[self.pos + 1] in "0123456789."):
                self.pos += 1
                return "-", None
            self.pos += 1
            while self.pos < n and text[self.pos] in "0123456789.":
                self.pos += 1
            return self.NUMBER, None  # Java keeps a number's value, not its text
        if self._alpha(c):
            while self.pos < n and (self._alpha(text[self.pos]) or self._digit(text[self.pos])):
                self.pos += 1
            return self.WORD, text[start:self.pos]
        if c in "\"'":
            return c, self._quoted(c)
        self.pos += 1
        return c, None

    _ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}

    def _quoted(self, quote: str) -> str:
        text, n = self.text, len(self.text)
        self.pos += 1
        out: list[str] = []
        while self.pos < n and text[self.pos] not in (quote, "\n", "\r"):
            c = text[self.pos]
            self.pos += 1
            if c == "\\" and self.pos < n:
                c = text[self.pos]
                self.pos += 1
                if c in "01234567":
                    digits = c
                    limit = 3 if c <= "3" else 2
                    while len(digits) < limit and self.pos < n and text[self.pos] in "01234567":
                        digits += text[self.pos]
                        self.pos += 1
                    c = chr(int(digits, 8))
                else:
                    c = self._ESCAPES.get(c, c)
            out.append(c)
        if self.pos < n and text[self.pos] == quote:
            self.pos += 1
        return "".join(out)


_FLAGS = ("REQUIRED", "REQUISITE", "SUFFICIENT", "OPTIONAL")


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """The login module and options of a ``sasl.jaas.config`` value, parsed
    as Kafka's ``JaasConfig`` does; exactly one entry, as the Java client
    requires. Errors never quote the text (it holds a password)."""
    where = "option 'kafka.sasl.jaas.config'"
    tokens = _Tokens(text)
    entries: list[tuple[str, dict[str, str]]] = []
    kind, value = tokens.next()
    while kind != _Tokens.EOF:
        if value is None:
            raise OptionError(f"{where}: expected a login module class name at character "
                              f"{tokens.pos}")
        module = value
        kind, flag = tokens.next()
        if kind == _Tokens.EOF:
            raise OptionError(f"{where}: the login module's control flag (required) is missing")
        if flag is None or flag.upper() not in _FLAGS:
            raise OptionError(f"{where}: the control flag after {module} must be required, "
                              "requisite, sufficient or optional")
        options: dict[str, str] = {}
        kind, key = tokens.next()
        while kind not in (_Tokens.EOF, ";"):
            if key is None:
                raise OptionError(f"{where}: expected an option name at character {tokens.pos}")
            eq, _ = tokens.next()
            kind, value = tokens.next() if eq == "=" else (eq, None)
            if eq != "=" or kind == _Tokens.EOF or value is None:
                raise OptionError(f"{where}: no value given for {key!r} (values are quoted: "
                                  f'{key}="...")')
            options[key] = value
            kind, key = tokens.next()
        if kind != ";":
            raise OptionError(f"{where}: the entry does not end with a semicolon (;)")
        entries.append((module, options))
        kind, value = tokens.next()
    if len(entries) != 1:
        raise OptionError(f"{where}: expected one login module entry, found {len(entries)}")
    return entries[0]
