"""Calls that must end at once: the exception a call raises, or a failure
when it is still running after its budget (a hang found, not waited out)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional


def raised_within(call: Callable[[], Any], seconds: float) -> Optional[
        BaseException]:
    """The exception `call()` raises within `seconds` (None if it
    returns); fails if it is still running then."""
    out = {}

    def run():
        try:
            call()
        except BaseException as error:  # reported to the test
            out["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    assert time.monotonic() - start < seconds
    return out.get("error")
