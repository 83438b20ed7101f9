"""Exceptions raised by the local dev services.

One small hierarchy so that the CLI can turn every expected failure into a
one-line message and exit code instead of a traceback.
"""

from __future__ import annotations


class DevServicesError(RuntimeError):
    """Base class: something about the dev services needs the user's attention."""


class MissingBinaryError(DevServicesError):
    """A server program is not installed; the message names what to install."""


class ServiceStartError(DevServicesError):
    """A server did not come up; the message names the service and its log."""
