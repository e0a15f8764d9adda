"""A TCP endpoint on 127.0.0.1 that accepts every connection and never answers.

The worst storage endpoint for a client: connects succeed, so only request
time limits end a call. Held in-process by one thread; `close()` releases
the port and every connection it holds.
"""

from __future__ import annotations

from tests.support.cli import option_flags
from tests.support.service import InProcessListener


class SilentEndpoint(InProcessListener):
    """Accepts connections on 127.0.0.1 and holds them open without a byte in reply."""

    def __init__(self) -> None:
        super().__init__("silent-endpoint")

    def storage_options(self, **extra: str) -> list[str]:
        """`-o` arguments that point a command's S3 table at this endpoint."""
        options = {
            "aws_endpoint": self.url,
            "allow_http": "true",
            "aws_access_key_id": "silent",
            "aws_secret_access_key": "silent-secret",
            "aws_region": "us-east-1",
            "aws_virtual_hosted_style_request": "false",
            **extra,
        }
        return option_flags(options)
