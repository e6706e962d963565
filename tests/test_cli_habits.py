"""CLI habits: groups without a subcommand print their help, every option has help and no internal
bounds, ``switch -c``, git commands that trimerge lacks name its equivalent."""

from __future__ import annotations

import click
import pytest

from trimerge.cli import cli as root
from trimerge.cli.habits import GIT_HABITS


def commands(cmd: click.Command, path=("trimerge",)):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from commands(sub, path + (name,))


@pytest.mark.parametrize("args", [[], ["table"], ["commit"], ["index"]])
def test_a_group_without_a_subcommand_prints_its_help_like_help(cli, args):
    res = cli(*args)
    helped = cli(*args, "--help")
    assert res.exit_code == 0 and res.stdout == helped.stdout and res.stdout.startswith("Usage:")
    assert "\\n" not in res.stdout and not res.stderr


def test_every_option_has_help_and_no_internal_bounds(cli):
    missing = [(" ".join(path), p.opts) for path, cmd in commands(root) for p in cmd.params
               if isinstance(p, click.Option) and not p.help]
    assert not missing
    for path, cmd in commands(root):
        text = cli(*path[1:], "--help").stdout
        assert "4611686018427387904" not in text, path


def test_switch_c_creates_and_switches(cli, seeded):
    res = cli("-C", seeded.uri, "switch", "-c", "feat", ok=True)
    assert "Switched to branch feat" in res.stdout and seeded.current_branch == "feat"
    again = cli("-C", seeded.uri, "switch", "-c", "feat")
    assert again.exit_code == 2 and "exists already" in again.stderr
    assert cli("-C", seeded.uri, "switch", "main", "--from", "feat").exit_code == 2
    assert seeded.current_branch == "feat"


@pytest.mark.parametrize("habit", ["checkout", "reset", "stash", "add", "restore"])
def test_git_habits_name_the_trimerge_equivalent(cli, habit):
    res = cli(habit, "x")
    assert res.exit_code == 2 and len(res.stderr_lines) == 1
    assert f"no such command '{habit}'" in res.stderr and GIT_HABITS[habit].split("'")[0] in res.stderr
    assert "switch" in cli("checkout").stderr
