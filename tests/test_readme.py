"""The docs keep their promises: the README's two fresh-machine commands, and a stack-file table
(docs/stack-file.md) that matches the models."""

from __future__ import annotations

from pathlib import Path

from gpu_cluster import config_table

README = Path(__file__).resolve().parent.parent / "README.md"
STACK_FILE_DOC = README.parent / "docs" / "stack-file.md"


def test_config_table_is_generated_from_the_models():
    assert config_table.TARGET == STACK_FILE_DOC
    text = STACK_FILE_DOC.read_text(encoding="utf-8")
    assert config_table.current_block(text) == config_table.block(), (
        "docs/stack-file.md's table is stale: run `./venv/bin/python -m gpu_cluster.config_table --write`")


def test_the_table_speaks_the_users_words():
    table = config_table.table()
    for jargon in ("typing.", "Annotated", "Strict", "NoneType", "datetime.", "<class"):
        assert jargon not in table, jargon
    assert "| `nodes` | integer |" in table and "| `capacity.start_date` | date (YYYY-MM-DD) \\| null |" in table


def test_every_spec_field_appears_in_the_table():
    table = config_table.table()
    for key in ("name", "network.existing_subnet_id", "storage.lustre.throughput_per_tib", "budget.emails", "tags"):
        assert f"| `{key}` |" in table


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one():
    head = README.read_text(encoding="utf-8").split("## ", 1)[0]
    assert "make plan" in head and "make test" in head
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci
