"""Path handling for a host root, so the same readers work on / and on a recorded fixture tree."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import InputError


@dataclass(frozen=True)
class Root:
    """A host filesystem root; `Root("/")` is the live host."""

    path: str = "/"

    @property
    def live(self) -> bool:
        return os.path.realpath(self.path) == "/"

    def join(self, abspath: str) -> str:
        """Map an absolute host path (e.g. /proc/stat) under this root."""
        return os.path.join(self.path, abspath.lstrip("/"))

    def read(self, abspath: str) -> str:
        """Read a whole text file, turning any OS error into a one-line InputError."""
        p = self.join(abspath)
        try:
            with open(p, "rb") as f:
                data = f.read()
        except OSError as e:
            raise InputError(p, e.strerror or str(e)) from None
        try:
            return data.decode()
        except UnicodeDecodeError:
            return data.decode("latin-1")

    def read_opt(self, abspath: str) -> str | None:
        """Like read() but None when the file does not exist (optional kernel files)."""
        p = self.join(abspath)
        if not os.path.exists(p):
            return None
        return self.read(abspath)

    def exists(self, abspath: str) -> bool:
        return os.path.exists(self.join(abspath))

    def listdir(self, abspath: str) -> list[str]:
        try:
            return os.listdir(self.join(abspath))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise InputError(self.join(abspath), e.strerror or str(e)) from None


def parse_int(path: str, text: str, what: str) -> int:
    """int() that names the file and the field when the kernel file is malformed."""
    try:
        return int(text)
    except ValueError:
        raise InputError(path, f"malformed {what}: {text!r} is not an integer") from None
