"""CI consumers: SARIF that GitHub code scanning accepts (a physicalLocation with a stable
repository-relative URI, partialFingerprints stable across runs, valid SARIF 2.1.0), and the human
summary still printed (on stderr) when a report takes stdout."""

from __future__ import annotations

import importlib.resources
import json

import jsonschema
import pyarrow as pa
import pytest

import trimerge
from trimerge.merge import merge


@pytest.fixture(scope="module")
def schema_validator() -> jsonschema.Draft4Validator:
    schema = json.loads(importlib.resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text())
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


@pytest.fixture(scope="module")
def conflicted(tmp_path_factory) -> trimerge.Repository:
    repo = trimerge.Repository.init(tmp_path_factory.mktemp("ci") / "repo")
    repo.create_table("price_list", pa.table({"sku": ["A1", "B2", "C3"], "price": [1.0, 2.5, 7.0]}), primary_key="sku")
    repo.branches.create("spring", from_ref="main")
    repo.update("price_list", pa.table({"sku": ["A1", "B2"], "price": [0.9, 2.75]}), branch="spring")
    repo.update("price_list", pa.table({"sku": ["A1", "B2"], "price": [1.1, 2.6]}))
    return repo


def sarif(repo) -> dict:
    return json.loads(merge("spring", "main", repo=repo, dry_run=True).report("sarif"))


def test_sarif_results_have_physical_locations_and_stable_fingerprints(conflicted, schema_validator):
    first, second = sarif(conflicted), sarif(conflicted)
    assert not sorted(schema_validator.iter_errors(first), key=str)
    results = first["runs"][0]["results"]
    assert len(results) == 2
    for r in results:
        loc = r["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uri"] == "tables/price_list"
        assert "sku='A1'" in loc["region"]["snippet"]["text"] or "sku='B2'" in loc["region"]["snippet"]["text"]
        assert r["partialFingerprints"]["trimergeConflict/v1"]
    prints = [r["partialFingerprints"] for r in results]
    assert prints == [r["partialFingerprints"] for r in second["runs"][0]["results"]]  # stable across runs
    assert len({p["trimergeConflict/v1"] for p in prints}) == 2  # one per conflict


def test_sarif_kit_accepts_the_report(conflicted):
    sarif_kit = pytest.importorskip("sarif_kit")
    sarif_kit.assert_valid(sarif(conflicted))


def test_report_on_stdout_keeps_the_summary_on_stderr(conflicted, cli):
    res = cli("-C", conflicted.uri, "merge", "spring", "--dry-run", "--report", "sarif")
    assert res.exit_code == 1
    assert json.loads(res.stdout)["version"] == "2.1.0"
    assert "CONFLICT row.update_update in price_list[sku='A1']" in res.stderr
    assert "dry run: 2 conflict(s)" in res.stderr
    quiet = cli("-C", conflicted.uri, "--json", "merge", "spring", "--dry-run", "--report", "sarif")
    assert "CONFLICT" not in quiet.stderr
