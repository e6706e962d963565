"""The runner: deliver pending events again and again (``trimerge hooks run --watch``, and a thread
of ``trimerge serve``), so that events a writer could not deliver — it was killed, its moment
passed, a receiver was down — arrive once they can.

Each pass is a :class:`~trimerge.hooks.delivery.Deliverer` pass over every hook that respects the
hooks' backoff; a pass that raises (a storage outage, a damaged document) is reported and the
next one tries again. Several runners may watch one repository: each hook is delivered by one of
them at a time (its lease), and a runner that dies leaves its hooks to the others.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from trimerge.hooks.delivery import Deliverer, DeliveryReport
from trimerge.lineage.errors import TrimergeError


class Runner:
    """Deliver ``repo``'s hooks (those in ``names``, default all) every ``interval`` seconds until
    :meth:`stop`; ``on_pass`` hears each pass's report, ``on_error`` each pass that failed."""

    def __init__(self, repo: Any, *, interval: float = 2.0, names: list[str] | None = None,
                 on_pass: Callable[[DeliveryReport], None] | None = None,
                 on_error: Callable[[str], None] | None = None):
        self.repo = repo
        self.interval = interval
        self.names = names
        self.on_pass = on_pass
        self.on_error = on_error
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run_once(self) -> DeliveryReport | None:
        try:
            report = Deliverer(self.repo, respect_backoff=True).run(self.names)
        except (TrimergeError, OSError) as exc:
            if self.on_error is not None:
                self.on_error(f"hooks: delivery pass failed: {' '.join(str(exc).split())[:300]}")
            return None
        if self.on_pass is not None:
            self.on_pass(report)
        return report

    def run(self) -> None:
        """Pass after pass until :meth:`stop`."""
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self.interval)

    def start(self) -> threading.Thread:
        """Run in a daemon thread (``trimerge serve``)."""
        thread = threading.Thread(target=self.run, name="trimerge-hooks-runner", daemon=True)
        thread.start()
        return thread
