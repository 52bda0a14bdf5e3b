"""What `gpu-cluster plan` prints for people: each stack's findings and notes as a block (a note once, cut
to one line unless --verbose), the summary table last and readable at 80 columns."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gpu_cluster import ui
from gpu_cluster.cli import main
from gpu_cluster.commands import plan as plan_cmd
from gpu_cluster.stackfile import SAMPLE_STACKS, every_stack


@pytest.fixture
def screen(monkeypatch):
    """Standard output as an 80-column terminal would get it."""
    buffer = io.StringIO()
    monkeypatch.setattr(ui, "out", Console(file=buffer, width=80, highlight=False, emoji=False, soft_wrap=True))
    return buffer


def test_plan_covers_every_stack_file_in_stacks_the_teams_own_too(tmp_path, monkeypatch):
    from gpu_cluster import stackfile

    stacks = tmp_path / "stacks"  # a copy: this checkout's stacks/ is shared by the parallel tests
    stacks.mkdir()
    for s in SAMPLE_STACKS:
        (stacks / f"Pulumi.{s}.yaml").write_text((stackfile.STACKS_DIR / f"Pulumi.{s}.yaml").read_text())
    (stacks / "Pulumi.a-team.yaml").write_text((stacks / "Pulumi.aws-entry.yaml").read_text())
    monkeypatch.setattr(stackfile, "STACKS_DIR", stacks)
    assert every_stack() == [*SAMPLE_STACKS, "a-team"], "the samples first, then the team's stacks"
    assert [p.name for p in plan_cmd.stack_files([], [])] == [f"Pulumi.{s}.yaml" for s in (*SAMPLE_STACKS, "a-team")]


def test_the_summary_table_fits_80_columns_without_folding_a_word(screen):
    reports = [{"stack": "tencent-scheduled", "shape": "HCCPNV6.96XLARGE2304", "nodes": 64, "gpus": 512,
                "monthly_cost": {"total": 12345678.0, "currency": "CNY", "unpriced": ["x"], "items": [1]},
                "budget": {"monthly_limit": 99999999, "currency": "CNY"}, "violations": [{"enforcement": "mandatory"}] * 12},
               {"stack": "aws-entry", "shape": "g4dn.xlarge", "nodes": 1, "gpus": 1,
                "monthly_cost": {"total": 518.4, "currency": "USD", "unpriced": [], "items": [1]},
                "budget": {"monthly_limit": 600, "currency": "USD"}, "violations": []}]
    plan_cmd.summary_table(reports)
    lines = screen.getvalue().splitlines()
    table = [line for line in lines if line.startswith(("tencent-scheduled", "aws-entry"))]
    assert len(table) == 2, lines  # one line per stack: nothing folded onto a second line
    assert "HCCPNV6.96XLARGE2304" in table[0] and "g4dn.xlarge" in table[1]
    assert all(len(line) <= 80 for line in lines[:4]), lines


def test_each_stack_shows_its_notes_once_cut_to_a_line_and_verbose_shows_them_whole(screen):
    long = "budget: " + "a very long note " * 20
    report = {"notes": [long, "short note", long], "violations": [], "monthly_cost": {"currency": "USD"}}
    plan_cmd.print_stack("aws-entry", report, verbose=False, report_path="build/plans/aws-entry.report.json")
    text = screen.getvalue()
    assert text.startswith("aws-entry: 2 note(s) (in full: --verbose or build/plans/aws-entry.report.json)")
    notes = [line for line in text.splitlines() if line.startswith("  note:")]
    assert len(notes) == 2 and notes[0].endswith("…") and len(notes[0]) == 80 and notes[1] == "  note: short note"
    screen.truncate(0)
    screen.seek(0)
    plan_cmd.print_stack("aws-entry", report, verbose=True, report_path="x")
    assert " ".join(screen.getvalue().split()).count(" ".join(long.split())) == 1


def test_the_default_output_puts_the_summary_table_last(tmp_path, capsys):
    capsys.readouterr()
    assert main(["plan", "--stack", "tencent-entry", "--stack", "tencent-scheduled", "--jobs", "1",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(out) if line.startswith("stack ") and "shape" in line)
    assert [line.split()[0] for line in out[header + 2:header + 4]] == ["tencent-entry", "tencent-scheduled"]
    assert out[-1] == f"plans written to {tmp_path}/"
    blocks = [line for line in out if line.endswith(".report.json)")]
    assert [b.split(":")[0] for b in blocks] == ["tencent-entry", "tencent-scheduled"] and header > out.index(blocks[-1])
