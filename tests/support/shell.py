"""A reader's terminal for the docs' examples: a document's fenced blocks, run in order in
one bash whose background jobs outlive a block (tests/integration/test_docs_tutorial.py,
tests/tour/test_readme_tour.py)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S)]


class Shell:
    """One bash the blocks run in, as a reader's terminal: its background jobs live on."""

    def __init__(self, cwd: Path) -> None:
        self.log = cwd / "shell.log"
        self.proc = subprocess.Popen(
            ["bash"], cwd=cwd, stdin=subprocess.PIPE, stdout=self.log.open("w"), stderr=subprocess.STDOUT, text=True
        )
        self.n = 0

    def run(self, script: str, timeout_s: float = 300, strict: bool = True) -> str:
        """SCRIPT's output; a failing command fails the test with the shell's log. Not
        ``strict``: as a reader types it, each command whatever the one before returned."""
        self.n += 1
        done = f"__block_{self.n}_done__"
        assert self.proc.stdin is not None
        flags = "set -eo pipefail" if strict else "true"
        self.proc.stdin.write(f"( {flags}\n{script}\n) && echo {done}=0 || echo {done}=$?\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.log.read_text()
            if f"{done}=" in text:
                status = text.split(f"{done}=", 1)[1].split("\n", 1)[0]
                assert status == "0" or not strict, (
                    f"block {self.n} exited {status}:\n{script}\n--- shell log ---\n{text[-4000:]}"
                )
                return text
            time.sleep(0.5)
        raise AssertionError(f"block {self.n} still running after {timeout_s:.0f} s:\n{script}")

    def start(self, script: str) -> None:
        """Background jobs: started in this shell itself, not in a subshell that ends."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(script + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("kill $(jobs -p) 2>/dev/null; wait; exit\n")
            self.proc.stdin.flush()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
