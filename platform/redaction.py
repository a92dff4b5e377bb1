"""The one rule for credentials in what the platform records or shows: ``redact``.

A URI may carry credentials: a password in its user info (``postgresql://user:PASSWORD@host/db``,
``s3://KEY:SECRET@bucket/prefix``, which pyarrow accepts) or in a query value whose name says so
(``?secret_key=...``, ``?token=...``).  Every value the platform writes to MLflow (params, tags,
dataset inputs, error messages), to the console and to a run's files passes through ``redact``
first; the environment is never recorded at all.  ``redact`` keeps everything else as it was,
so a redacted URI still says which bucket, host and database was meant.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Mapping

MASK = "***"

# scheme://user:password@  (the user stays: an account name or an access key id, not a secret).
# The password runs to the last "@" before a space: an AWS secret may hold "/", a database
# password "#" or "?"; masking too much (a "@" later in a path) is the safe way to be wrong.
_USER_INFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^\s:/@?#'\"]*):(?P<password>\S*)@")
# a web URL's user without a password is a token (https://TOKEN@github.com/..., git+https://...)
_URL_TOKEN = re.compile(r"(?P<scheme>\b(?:git\+)?(?:https?|wss?)://)(?P<token>[^\s:/@?#'\"]+)@")
# a credential's name: one that ends in one of _ALWAYS (PGPASSWORD, client_secret, apikey), one of
# _WORDS after "_", "-" or "." (secret_key, X-Amz-Signature, GITHUB_TOKEN), or a camelCase one
# (apiKey, sessionToken); never a word that merely contains one (tokenizer, sslkey, keyword,
# passfile).  A bare word of _WORDS (key=, token=) is a credential's name in a URL's query or as
# a quoted JSON or YAML key only: in other text "key=value" is too often something else.
_ALWAYS = r"password|passwd|passphrase|secret|credentials?|apikey|authorization|privatekey"
_WORDS = r"token|key|sig|signature|pass|pwd|auth|cookie"
_NAME = (rf"(?:(?i:[A-Za-z0-9_.-]*(?:{_ALWAYS}))|(?i:(?:[A-Za-z0-9]+[_.-])+(?:{_WORDS}))"
         r"|[a-z][A-Za-z0-9]*(?:Key|Token|Secret|Password|Passwd|Signature|Credentials?|Auth))")
# NAME=value, NAME: value, "NAME": "value", 'NAME'='value': an environment assignment, JSON or
# YAML, a header (Authorization: Bearer VALUE), a URL's query (?, &, ; and &amp; separators); the
# value runs to its closing quote, or unquoted to a space, a separator or a closing bracket
_VALUE = (r"\s*[:=]\s*)(?P<scheme>(?i:(?:bearer|basic|token|digest)\s+))?"
          r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s&;,'\"}\]]+)")
_ASSIGNED = re.compile(rf"(?<![A-Za-z0-9_.])(?P<name>[\"']?{_NAME}[\"']?{_VALUE}")
_IN_QUERY = re.compile(rf"(?<=[?&;])(?P<name>(?i:{_WORDS}){_VALUE}")
_QUOTED_KEY = re.compile(rf"(?P<name>[\"'](?i:{_WORDS})[\"']{_VALUE}")  # JSON's "token": ..., YAML's 'key': ...


def redact(text: str) -> str:
    """``text`` with every URI password, web URL token and credential value replaced by ``***``."""
    if "://" not in text and "=" not in text and ":" not in text:
        return text
    text = _USER_INFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@" if m["password"] else m[0], text)
    text = _URL_TOKEN.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    text = _IN_QUERY.sub(_masked_value, text)
    text = _QUOTED_KEY.sub(_masked_value, text)
    return _ASSIGNED.sub(_masked_value, text)


def _masked_value(match: re.Match) -> str:
    value = match["value"]
    if value.lstrip("\"'").startswith(MASK):  # masked already (a URI's password, an earlier rule)
        return match[0]
    quote = value[0] if value[0] in "\"'" and len(value) > 1 else ""
    return f"{match['name']}{match['scheme'] or ''}{quote}{MASK}{quote}"


def redact_values(values: Mapping[str, object]) -> dict[str, str]:
    """Every value of ``values`` as a redacted string (MLflow params and tags)."""
    return {key: redact(str(value)) for key, value in values.items()}


class RedactingStream(io.TextIOBase):
    """A text stream (the terminal) that passes everything written to it through ``redact``:
    what a command prints, Ray's and MLflow's console lines in its process included."""

    def __init__(self, stream) -> None:
        self.stream = stream

    @property
    def encoding(self):
        return self.stream.encoding

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.stream.write(redact(text))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()


class RedactingFormatter(logging.Formatter):
    """A logging formatter whose records pass through ``redact`` (a sweep's ``console.log``)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def split_password(url: str) -> tuple[str, str | None]:
    """``url`` without the password of its user info, and that password (None if it has none),
    the rest exactly as written: for a program that takes the password another way (PostgreSQL's
    ``PGPASSWORD``), off its command line and out of what is saved."""
    from urllib.parse import unquote

    match = _USER_INFO.match(url)
    if match is None:
        return url, None
    return f"{match['scheme']}{match['user']}@{url[match.end():]}", unquote(match["password"])
