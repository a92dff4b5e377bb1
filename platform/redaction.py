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
# ?name=value or &name=value where the name is a credential's: a whole word, or one after "_"
# or "-" (secret_key, X-Amz-Signature), never a word that merely contains one (tokenizer, sslkey)
_SECRET_NAME = (r"(?:[^\s=&?#'\"]*[_-])?(?:password|passwd|pass|pwd|secret|token|credential|credentials|"
                r"signature|sig|key|sslpassword)")
_QUERY_SECRET = re.compile(rf"(?P<name>[?&]{_SECRET_NAME}=)(?P<value>[^\s&#'\"]*)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every URI password and every credential query value replaced by ``***``."""
    if "://" not in text and "=" not in text:
        return text
    text = _USER_INFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@" if m["password"] else m[0], text)
    return _QUERY_SECRET.sub(lambda m: m["name"] + (MASK if m["value"] else ""), text)


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
