"""The repository marker ``_trimerge/repo.json``: written last by ``init``, read first by ``open``.

``init`` never writes over anything: an existing or half-made repository (any ``_trimerge/``
content), or a location inside another repository.
"""

from __future__ import annotations

from trimerge.lineage.documents import Documents
from trimerge.lineage.errors import AlreadyExistsError, InvalidOperationError
from trimerge.lineage.location import META_DIR, Location

REPO_DOC = "repo.json"


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
