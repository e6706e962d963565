"""What a hook is told: the event as JSON (the webhook's body, the command's stdin) and, for a
command, the same in environment variables.

Every event has ``event``, ``id``, ``repository``, ``branch``, ``commit``, ``parents``, ``actor``,
``time`` and ``tables`` (per table whose rows changed: ``status``, ``inserted``, ``deleted``,
``updated``, ``cells_changed``, counted by the diff engine at the cost of the change). A move
also has ``old`` (the commit the branch left; None when it was created) and ``reason`` (what
moved it: ``commit: …``, ``merge: …``, ``reset: …``, ``push: …``…); a tag has ``tag``; a merge
request's event has ``request`` (number, source, into, title, state, author) and ``detail``.
"""

from __future__ import annotations

import json
from typing import Any

from trimerge.hooks.sources import Event
from trimerge.lineage.commit import format_time
from trimerge.lineage.errors import TrimergeError


def change_counts(repo: Any, old: str | None, new: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """Per table whose content differs between commits ``old`` and ``new``, its status and
    counts; (None, why) when they cannot be counted (data reclaimed, a damaged table)."""
    if old is None or new is None or old == new:
        return {}, None
    from trimerge.diff import diff

    try:
        d = diff(old, new, repo=repo)
        out = {}
        for name, td in sorted(d.tables.items()):
            if td.storage_status == "unchanged":
                continue
            td.count_first = True  # counts only: no row images
            status = td.status
            if status == "unchanged":
                continue
            out[name] = {"status": status, **td.counts.to_json()}
        return out, None
    except (TrimergeError, OSError, ValueError, RuntimeError) as exc:
        return None, " ".join(str(exc).split())[:300] or type(exc).__name__


def _commit_fields(repo: Any, commit_id: str | None) -> dict[str, Any]:
    if commit_id is None:
        return {"commit": None, "parents": [], "message": None}
    try:
        c = repo.commit(commit_id)
    except TrimergeError:  # reclaimed by gc since: the event still says which commit it was
        return {"commit": commit_id, "parents": [], "message": None}
    return {"commit": c.id, "parents": list(c.parents), "message": c.message}


def build(repo: Any, event: Event) -> dict[str, Any]:
    """The JSON of ``event`` (without the hook's name: the same for every hook)."""
    doc: dict[str, Any] = {"event": event.kind, "id": event.id, "repository": repo.uri, "time": format_time(event.time)}
    if event.entry is not None:
        e = event.entry
        doc.update(branch=e.ref, **_commit_fields(repo, e.new if e.new is not None else e.old), old=e.old,
                   actor=e.actor, reason=e.reason)
        if e.new is None:  # a deletion: the commit is where the branch was
            doc["commit"], doc["old"] = e.old, e.old
        tables, why = change_counts(repo, e.old, e.new)
    elif event.tag is not None:
        t = event.tag
        doc.update(branch=None, **_commit_fields(repo, t.commit_id), actor=t.actor, tag=t.name, tag_message=t.message)
        tables, why = {}, None
    else:
        r, ev = event.request, event.request_event
        tip = repo.refs.branch(r.into)
        doc.update(branch=r.into, **_commit_fields(repo, r.merge_commit if ev.kind == "merged" and r.merge_commit
                                                   else (tip.commit_id if tip is not None else None)),
                   actor=ev.actor, request={"id": r.id, "source": r.source, "into": r.into, "title": r.title,
                                            "state": r.state, "author": r.author},
                   detail=_jsonable(ev.detail))
        tables, why = {}, None
    doc["tables"] = tables
    if why is not None:
        doc["tables_error"] = why
    return doc


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def body(doc: dict[str, Any], hook: str) -> bytes:
    """The bytes sent (and signed): the event with the hook's name, compact JSON."""
    return json.dumps({**doc, "hook": hook}, sort_keys=True, separators=(",", ":"), default=str).encode()


def environment(doc: dict[str, Any], hook: str) -> dict[str, str]:
    """The environment a command hook gets besides its stdin (text values only)."""
    fields = {"TRIMERGE_EVENT": doc.get("event"), "TRIMERGE_EVENT_ID": doc.get("id"),
              "TRIMERGE_DELIVERY": doc.get("id"), "TRIMERGE_HOOK": hook,
              "TRIMERGE_REPOSITORY": doc.get("repository"), "TRIMERGE_BRANCH": doc.get("branch"),
              "TRIMERGE_COMMIT": doc.get("commit"), "TRIMERGE_OLD_COMMIT": doc.get("old"),
              "TRIMERGE_ACTOR": doc.get("actor"), "TRIMERGE_TIME": doc.get("time"),
              "TRIMERGE_TAG": doc.get("tag"), "TRIMERGE_REF": doc.get("ref"),
              "TRIMERGE_REQUEST": str(doc["request"]["id"]) if isinstance(doc.get("request"), dict) else None}
    return {k: str(v).replace("\x00", "") for k, v in fields.items() if v is not None}
