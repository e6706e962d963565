"""Recovery: finishing or undoing writes whose writer died.

A transaction records an intent (``intents/<ulid>.json``) before its first physical effect. When a
writer finds a branch's lease held by a dead holder, it takes the lease over and repairs that
branch's foreign intents while holding it; a read-write open repairs every intent whose branch is
not held by a live writer. An intent is *completed* under its original commit id when the commit
was planned and every table write it names finished; otherwise every Lance branch it touched is
restored to the branch tip and what it created is dropped. Either way a commit by
``trimerge:recovery`` records what happened.

Only an intent that cannot be parsed is moved to ``quarantine/``; an intent whose repair fails for
an environmental reason (a full disk, an unreachable store) stays where it is and is retried.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from trimerge.lineage.storage.ids import new_ulid
from trimerge.lineage.commit import Commit
from trimerge.lineage.errors import CorruptRepositoryError, StorageError
from trimerge.lineage.history.refs import Branch, now, publish

if TYPE_CHECKING:
    from trimerge.lineage.hosts import RecoveryHost

INTENTS = "intents"
QUARANTINE = "quarantine"
RECOVERY_ACTOR = "trimerge:recovery"


def intent_key(ulid: str) -> str:
    return f"{INTENTS}/{ulid}.json"


@dataclass
class RecoveryReport:
    completed: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    retry_later: list[str] = field(default_factory=list)
    temporaries_removed: list[str] = field(default_factory=list)  # temporary branches of dead processes


class _Unusable(Exception):
    """An intent document that cannot be acted on."""


def parse_intent(doc: Any) -> dict[str, Any]:
    try:
        if not all(isinstance(doc[k], str) for k in ("ulid", "branch", "lock_token")):
            raise _Unusable("not an intent")
        if not isinstance(doc.get("touched", []), list):
            raise _Unusable("malformed 'touched'")
        return doc
    except (KeyError, TypeError) as exc:
        raise _Unusable(str(exc)) from None


class Recovery:
    """Repairs interrupted writes of one repository."""

    def __init__(self, repo: "RecoveryHost"):
        self.repo = repo

    # -- finding work
    def _intents(self, report: RecoveryReport) -> Iterable[tuple[str, dict[str, Any]]]:
        docs = self.repo.docs
        for key in docs.list(INTENTS):
            try:
                doc = docs.get(key)
                if doc is None:
                    continue  # finished meanwhile
                yield key, parse_intent(doc)
            except (CorruptRepositoryError, _Unusable):
                self._quarantine(key)
                report.quarantined.append(key)

    def recover_all(self) -> RecoveryReport:
        """Repair every intent whose branch no live writer holds."""
        report = RecoveryReport()
        for _key, intent in list(self._intents(report)):
            lease = self.repo.branch_lease(intent["branch"], "recovery")
            if not lease.try_acquire():
                continue  # a live writer holds the branch; it repairs what it took over itself
            try:
                self.repair_branch(intent["branch"], lease.token, report)
            finally:
                lease.release()
        # After the intents: a dead rebase's replay may have left one on its temporary branch.
        from trimerge.lineage.safety.temporaries import sweep

        report.temporaries_removed = sweep(self.repo)
        return report

    def repair_branch(self, branch: str, my_token: str, report: RecoveryReport | None = None) -> RecoveryReport:
        """Repair the intents of ``branch`` left by earlier lease holders. Caller holds the lease."""
        report = report if report is not None else RecoveryReport()
        for key, intent in list(self._intents(report)):
            if intent["branch"] != branch or intent["lock_token"] == my_token:
                continue
            try:
                outcome = self._repair(intent)
            except (StorageError, OSError) as exc:  # environmental: keep the intent, retry later
                report.retry_later.append(f"{key}: {exc}")
                continue
            except Exception:  # a record that cannot be acted on must never brick the repository
                self._quarantine(key)
                report.quarantined.append(key)
                continue
            (report.completed if outcome == "completed" else report.rolled_back).append(intent["ulid"])
            self.repo.docs.delete(key)
        return report

    def _quarantine(self, key: str) -> None:
        docs = self.repo.docs
        if not docs.copy(key, f"{QUARANTINE}/{key.rsplit('/', 1)[1]}.{new_ulid()}"):
            return
        docs.delete(key)

    # -- repairing one intent
    def _note(self, branch: Branch, tip: Commit, message: str, metadata: Mapping[str, str]) -> Branch:
        note = self.repo.commits.build(parents=[tip.id], actor=RECOVERY_ACTOR, branch=branch.name,
                                       tables=tip.tables, message=message, metadata=metadata, created_at=now())
        return publish(self.repo.commits, self.repo.refs, branch, note)

    def _repair(self, intent: Mapping[str, Any]) -> str:
        repo = self.repo
        if intent.get("scratch"):  # never to be published (a merge's virtual base): drop its forks
            self.undo_writes(intent.get("touched", []), None)
            return "rolled_back"
        branch = repo.refs.branch(intent["branch"])
        if branch is None:
            raise _Unusable(f"branch {intent['branch']!r} is gone")
        touched = intent.get("touched", [])
        planned = intent.get("commit")
        if branch.commit_id == (planned or {}).get("id"):
            return "completed"  # published; only the intent's removal was missing
        if planned and branch.commit_id == planned["parents"][0] and self._all_written(planned, touched):
            commit = Commit.from_json(planned)
            branch = publish(repo.commits, repo.refs, branch, commit)
            self._note(branch, commit,
                       f"Recovery: completed interrupted commit {commit.id[:10]} ({commit.message})",
                       {"recovery.action": "completed", "recovery.ulid": commit.ulid, "recovery.commit": commit.id})
            return "completed"
        tip = repo.commit(branch.commit_id)
        undone = self.undo_writes(touched, tip)
        self._note(branch, tip,
                   (f"Recovery: rolled back interrupted write {intent['ulid']} by {intent.get('actor', '?')}"
                    f" ({intent.get('message', '')})" + (": " + "; ".join(undone) if undone else "")),
                   {"recovery.action": "rolled_back", "recovery.ulid": intent["ulid"]})
        return "rolled_back"

    def _all_written(self, planned: Mapping[str, Any], touched: Iterable[Mapping[str, Any]]) -> bool:
        """Whether every touched Lance branch's latest version is the one the planned commit names."""
        store = self.repo.table_store
        commit = Commit.from_json(planned)
        wanted = {(t.dataset, t.lance_branch): t for t in commit.tables.values()}
        for item in touched:
            tv = wanted.get((item["dataset"], item["lance_branch"]))
            if tv is not None and store.latest_version(tv) != tv.version:
                return False
        return True

    def undo_writes(self, touched: Iterable[Mapping[str, Any]], tip: Commit | None) -> list[str]:
        """Make every Lance branch a failed write touched agree with ``tip`` again; drop what it created.
        Returns what had to be undone (empty: the write failed before changing anything)."""
        store = self.repo.table_store
        at_tip = {(tv.dataset, tv.lance_branch): tv for tv in (tip.tables.values() if tip else [])}
        undone = []
        for item in touched:
            key = (item["dataset"], item["lance_branch"])
            if key in at_tip:
                if store.has_data(at_tip[key]) and store.clean_head(at_tip[key]) is None:
                    store.writable_head(at_tip[key])
                    undone.append(f"restored {key[0]}@{key[1]} v{at_tip[key].version}")
            elif item.get("created_dataset"):
                store.remove(key[0])
                undone.append(f"removed new dataset {key[0]}")
            elif item.get("created_fork"):
                try:
                    store.delete_fork(*key)
                except Exception:  # reclaimed later by cleanup
                    pass
                undone.append(f"dropped fork {key[1]} of {key[0]}")
        return undone


