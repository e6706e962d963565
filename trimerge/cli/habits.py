"""CLI habits: help text on every option, no internal bounds in help, git commands that name
trimerge's equivalent, and ``switch -c``.

:func:`polish` runs once all commands are registered (``trimerge.cli``): it gives options that
have none a help text and shows huge count bounds as ``x>=0``. :data:`GIT_HABITS` maps git commands
trimerge does not have to what to type instead (used by the group's command lookup).
"""

from __future__ import annotations

from typing import Iterator

import click

__all__ = ["GIT_HABITS", "GIT_OPTION_HABITS", "OPTION_HELP", "Count", "habit_hint", "option_hint", "polish", "usage_hint"]

#: Bounds at or above this are overflow guards, not limits worth showing.
HUGE = 2**60

#: Help for options registered without any: by command name, then for every command ("*").
OPTION_HELP: dict[tuple[str, str], str] = {
    ("tag create", "--message"): "Tag message (an annotation kept with the tag).",
    ("*", "--message"): "Commit message (default: one describing the operation).",
    ("*", "--actor"): "Who made the change (default: $TRIMERGE_ACTOR, else user@host).",
    ("log", "--actor"): "Only commits by this actor.",
    ("*", "--granularity"): "Smallest unit merged: cell (default), row or table; two different changes "
                            "inside one unit are a conflict.",
    ("*", "--limit"): "Show at most N (default: all).",
    ("*", "--format"): "Output format (default: a table on a terminal).",
}

#: git commands trimerge has no command for -> what to use instead.
GIT_HABITS = {
    "checkout": "use 'trimerge switch NAME' (create it: 'trimerge switch -c NAME'); read an old state with "
                "'trimerge read TABLE --ref REF'",
    "reset": "use 'trimerge branch reset NAME REF' (undo it with 'trimerge branch reset NAME NAME@{1}')",
    "restore": "use 'trimerge table restore TABLE --ref REF' (one commit); read an old state with "
               "'trimerge read TABLE --ref REF'",
    "add": "there is no staging: every write ('load', 'table create', 'delete') is a commit",
    "stash": "there is no working copy to stash: make a branch ('trimerge switch -c NAME') and write there",
    "branches": "use 'trimerge branch list'",
    "tags": "use 'trimerge tag list'",
    "history": "use 'trimerge log'",
    "blame": "use 'trimerge log' with a TABLE::KEY address, or repo.entity_history() in Python",
    "ls": "use 'trimerge table list'",
}


#: git options trimerge spells otherwise: (command, option) -> what to type instead.
GIT_OPTION_HABITS = {
    ("branch", "-d"): "delete a branch with 'trimerge branch delete NAME'",
    ("branch", "-D"): "delete a branch with 'trimerge branch delete -D NAME' (even if unmerged)",
    ("branch", "-m"): "branches are not renamed: 'trimerge branch create NEW --from OLD', then "
                      "'trimerge branch delete OLD'",
    ("branch", "-c"): "copy a branch with 'trimerge branch create NEW --from OLD'",
    ("commit", "-m"): "there is no staging: every write ('load', 'table create', 'delete') is a "
                      "commit; give its message with -m on that write",
    ("commit", "-a"): "there is no staging: every write ('load', 'table create', 'delete') is a commit",
    ("switch", "-C"): "reset a branch with 'trimerge branch reset NAME REF', then 'trimerge switch NAME'",
}


def option_hint(command: str, option: str) -> str | None:
    """The hint for a git option ``command`` (e.g. ``branch``) does not have, or None."""
    hint = GIT_OPTION_HABITS.get((command, option))
    return f"no such option {option} of '{command}': {hint}" if hint else None


def usage_hint(exc: click.exceptions.UsageError) -> str | None:
    """For an unknown option that is a git spelling (``branch -d``, ``commit -m``): the hint naming
    trimerge's; None for any other usage error."""
    if not isinstance(exc, click.exceptions.NoSuchOption) or exc.ctx is None:
        return None
    names, ctx = [], exc.ctx
    while ctx.parent is not None:  # the command path without the program's name
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return option_hint(" ".join(reversed(names)), exc.option_name)


def habit_hint(name: str) -> str | None:
    """The hint for a git command trimerge does not have, or None."""
    hint = GIT_HABITS.get(name)
    return f"no such command {name!r}: {hint}" if hint else None


class Count(click.IntRange):
    """A count with an overflow guard that the help does not show (``x>=0``, not ``0<=x<=2**62``)."""

    def convert(self, value, param, ctx):  # noqa: ANN001 - click's signature
        try:
            big = self.max is not None and int(value) > self.max
        except (TypeError, ValueError):
            big = False
        if big:
            self.fail(f"{value} is too large (at most {self.max})", param, ctx)
        return super().convert(value, param, ctx)

    def _describe_range(self) -> str:
        if self.max is not None and self.max >= HUGE:
            return f"x>={self.min}" if self.min is not None else "any"
        return super()._describe_range()


def _walk(cmd: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _walk(sub, path + (name,))


def polish(root: click.Group) -> None:
    """Give every option of every command a help text and hide overflow guards from the help."""
    for path, cmd in _walk(root):
        name = " ".join(path)
        for param in cmd.params:
            if not isinstance(param, click.Option):
                continue
            if isinstance(param.type, click.IntRange) and not isinstance(param.type, Count) \
                    and param.type.max is not None and param.type.max >= HUGE:
                t = param.type
                param.type = Count(min=t.min, max=t.max, min_open=t.min_open, max_open=t.max_open, clamp=t.clamp)
                if param.metavar is None:
                    param.metavar = "N"
            if not param.help:
                long = max(param.opts, key=len)
                param.help = OPTION_HELP.get((name, long)) or OPTION_HELP.get(("*", long))
