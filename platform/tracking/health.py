"""Whether an HTTP tracking server answers its health check, asked from this process (the
store and the relay actor both ask it; neither imports the other for it)."""

from __future__ import annotations


def _unreachable(url: str, timeout: float) -> str | None:
    """Why nothing usable answers at ``url`` (None if something does)."""
    import ssl
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout):  # noqa: S310 - the user's own tracking server
            return None
    except urllib.error.HTTPError as error:  # a server answered: fine unless it is failing (5xx)
        return f"HTTP {error.code} {error.reason}" if error.code >= 500 else None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, ssl.SSLError):
            return None  # TLS settings are MLflow's business (MLFLOW_TRACKING_SERVER_CERT_PATH, ...)
        return str(reason)


def server_down(tracking_uri: str, timeout: float = 5.0) -> str | None:
    """Why an HTTP tracking server does not answer its health check (None: it does, or the store
    is not a server)."""
    if not tracking_uri.startswith(("http://", "https://")):
        return None
    return _unreachable(tracking_uri.rstrip("/") + "/health", timeout)
