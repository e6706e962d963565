"""The repository marker ``_trimerge/repo.json``: written last by ``init``, read first by ``open``.

``init`` never writes over anything: an existing or half-made repository (any ``_trimerge/``
content), or a location inside another repository.
"""

from __future__ import annotations

from trimerge.lineage.storage.documents import Documents
from trimerge.lineage.errors import AlreadyExistsError, CorruptRepositoryError, InvalidOperationError
from trimerge.lineage.storage.location import META_DIR, Location

REPO_DOC = "repo.json"
FORMAT = 1


def marker_problems(doc: object) -> list[str]:
    """What is wrong with a parsed ``repo.json`` (empty: nothing)."""
    if not isinstance(doc, dict):
        return [f"it holds {type(doc).__name__}, not an object"]
    problems = []
    if doc.get("format") != FORMAT:
        problems.append(f"format is {doc.get('format')!r}, not {FORMAT}" if "format" in doc else "it has no format")
    for key in ("root", "location"):
        if not isinstance(doc.get(key), str) or not doc.get(key):
            problems.append(f"it has no {key}")
    return problems


def read_marker(docs: Documents) -> dict | None:
    """``repo.json`` of the ``_trimerge/`` folder ``docs``; None when absent. A damaged one is an
    error naming the file and the repair, never read as a default (a ``{}`` would silently turn
    off the moved-repository check)."""
    doc = docs.get(REPO_DOC)
    if doc is None:
        return None
    problems = marker_problems(doc)
    if problems:
        raise CorruptRepositoryError(f"{docs.where}/{REPO_DOC} is damaged ({'; '.join(problems)}): {REPAIR}")
    return doc


REPAIR = (f'restore it as {{"format": {FORMAT}, "root": "<the first commit, the last line of trimerge log>", '
          '"location": "<the repository\'s path or URI>"}')


def refuse_to_init(location: Location, docs: Documents) -> None:
    """Raise unless ``location`` is free for a new repository (``docs``: its ``_trimerge/`` folder)."""
    if docs.read(REPO_DOC, damaged_as_none=True) is not None:
        raise AlreadyExistsError(f"a trimerge repository exists already at {location.uri}")
    if docs.backend.children(""):
        raise AlreadyExistsError(
            f"{location.join(META_DIR)} exists already (an interrupted init or a damaged repository); "
            f"init refuses to write over it: check it, and remove {META_DIR}/ yourself only if it holds nothing")
    for outer in location.ancestors():
        if outer.backend(META_DIR).get(REPO_DOC) is not None:
            raise InvalidOperationError(f"{location.uri} lies inside the trimerge repository at {outer.uri}; "
                                        "create the new repository somewhere else")
