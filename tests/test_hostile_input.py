"""Hostile input is ordinary input: a pull request may carry any file. Alias bombs, oversized files,
symbolic links in stacks/ and under the outputs, and Markdown in names are each refused or made harmless,
in one sentence (docs/architecture.md, "Stack file"; README, exit statuses)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpu_cluster import files
from gpu_cluster.cli import main
from gpu_cluster.errors import UserError
from gpu_cluster.review import code, md, render_markdown, StackReview
from gpu_cluster.stackfile import ROOT, STACKS_DIR, read_stack_file

BOMB_LEVELS = 9
"""Nine levels of ten aliases each: 10**9 strings once expanded, from a file of about 600 bytes."""


def bomb(levels: int = BOMB_LEVELS) -> str:
    lines = ["config:", '  l0: &l0 ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels + 1):
        lines.append(f"  l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 10) + "]")
    lines.append(f"  gpu-cluster:cluster: *l{levels}")
    return "\n".join(lines) + "\n"


def _main(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return status, out, err


def test_an_alias_bomb_is_refused_before_anything_is_built(tmp_path, capsys, monkeypatch):
    path = tmp_path / "Pulumi.bomb.yaml"
    path.write_text(bomb())
    assert path.stat().st_size < 1024
    built = []
    monkeypatch.setattr(files._StrictLoader, "construct_document",
                        lambda self, node: built.append(node) or pytest.fail("the document was built"))
    status, out, err = _main(capsys, "plan", "--stack-file", str(path), "--out", str(tmp_path / "plans"))
    assert status == 2 and not built
    assert f"stack file {path} expands to more than 100,000 values through YAML aliases" in err
    assert not (tmp_path / "plans").exists()


def test_the_expansion_count_is_linear_and_catches_a_self_reference():
    node = yaml.compose(bomb(40), Loader=yaml.SafeLoader)  # 10**40 once expanded; counting it is instant
    assert files._expanded_nodes(node, 1000) == 1001
    small = yaml.compose("a: &a [1, 2]\nb: [*a, *a]\n", Loader=yaml.SafeLoader)
    # mapping + 2 keys + a's list (3 nodes) + b's list + two more copies of a's list (3 each)
    assert files._expanded_nodes(small, 100) == 1 + 2 + 3 + 1 + 3 + 3
    cyclic = yaml.compose("a: &a [*a]\n", Loader=yaml.SafeLoader)
    assert files._expanded_nodes(cyclic, 100) == 101


def test_aliases_that_stay_small_are_read_as_before(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("defaults: &d {epochs: 2}\nrun: *d\n")
    assert files.load_yaml(path, "workload file") == {"defaults": {"epochs": 2}, "run": {"epochs": 2}}


@pytest.mark.parametrize("what, reader", [
    ("stack file", lambda p: read_stack_file(p)),
    ("workload file", lambda p: files.load_yaml(p, "workload file")),
    ("price file", lambda p: files.load_yaml(p, "price file")),
    ("policy config", lambda p: __import__("gpu_cluster.policyrun", fromlist=["x"]).load_policy_config(str(p))),
])
def test_files_over_the_size_cap_are_refused_unread(tmp_path, what, reader):
    path = tmp_path / "Pulumi.big.yaml"
    with open(path, "wb") as f:
        f.truncate(files.MAX_INPUT_BYTES + 1)  # sparse: nothing to read if the cap works
    with pytest.raises(UserError, match=rf"{what} {path} is larger than 4 MiB; no {what} is that large"):
        reader(path)


def test_a_symlinked_stack_file_in_stacks_is_refused_but_a_named_outside_file_is_read(tmp_path, capsys, monkeypatch):
    from gpu_cluster import stackfile

    stacks = tmp_path / "repo" / "stacks"  # a checkout's stacks/ (this one's is shared by the parallel tests)
    stacks.mkdir(parents=True)
    monkeypatch.setattr(stackfile, "STACKS_DIR", stacks)
    outside = tmp_path / "Pulumi.outside.yaml"
    outside.write_text((STACKS_DIR / "Pulumi.aws-entry.yaml").read_text())
    link = stacks / "Pulumi.zz-linked.yaml"
    link.symlink_to(outside)
    status, out, err = _main(capsys, "plan", "--stack", "zz-linked", "--out", str(tmp_path / "plans"))
    assert status == 2 and f"stack file {link} is a symbolic link; stack files in stacks/ must be regular files" in err
    assert not (tmp_path / "plans" / "zz-linked.json").exists()
    # Named by the user on the command line, a file outside the repository is theirs to plan.
    assert read_stack_file(outside).stack == "outside"


def test_a_stack_file_that_resolves_outside_the_repository_is_refused(tmp_path):
    from gpu_cluster.stackfile import linked_stack_file

    root = tmp_path / "repo"
    (root / "stacks").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "Pulumi.x.yaml").write_text("config: {}\n")
    (root / "stacks-real").symlink_to(tmp_path / "elsewhere")  # a folder link inside stacks/ would be the same
    assert linked_stack_file(root / "stacks" / "Pulumi.none.yaml", root / "stacks") is None
    (root / "stacks" / "Pulumi.x.yaml").symlink_to(tmp_path / "elsewhere" / "Pulumi.x.yaml")
    assert "is a symbolic link" in linked_stack_file(root / "stacks" / "Pulumi.x.yaml", root / "stacks")
    # stacks/ itself a link to a folder outside the repository: its files resolve outside it.
    other = tmp_path / "repo2"
    other.mkdir()
    (other / "stacks").symlink_to(tmp_path / "elsewhere")
    assert "outside the repository" in linked_stack_file(other / "stacks" / "Pulumi.x.yaml", other / "stacks")


def test_nothing_is_written_through_a_symbolic_link(tmp_path):
    target = tmp_path / "victim"
    target.write_text("precious\n")
    link = tmp_path / "review.md"
    link.symlink_to(target)
    with pytest.raises(UserError, match="is a symbolic link; nothing is written through one"):
        files.write_text(link, "overwritten", "--out")
    assert target.read_text() == "precious\n"
    # A folder of this checkout that a pull request made a link (build/ -> elsewhere) is refused too.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    build = ROOT / "build-zz-link"
    build.symlink_to(elsewhere)
    try:
        with pytest.raises(UserError, match=f"{build} is a symbolic link"):
            files.write_text(build / "review.md", "x", "--out")
        assert not (elsewhere / "review.md").exists()
    finally:
        build.unlink()


def test_a_link_put_in_place_after_the_check_is_not_followed(tmp_path, monkeypatch):
    target, path = tmp_path / "victim", tmp_path / "out.md"
    target.write_text("precious\n")
    real = files.output_file

    def racing(p, what):
        checked = real(p, what)
        path.symlink_to(target)  # swapped in between the check and the write
        return checked

    monkeypatch.setattr(files, "output_file", racing)
    with pytest.raises(UserError, match="cannot be written"):
        files.write_text(path, "overwritten", "--out")
    assert target.read_text() == "precious\n"


def test_everything_from_a_stack_file_is_escaped_before_it_reaches_markdown():
    hostile = "x|y <img src=x onerror=alert(1)> [click](https://evil.example) `tick` *b* ~s~\nnext"
    review = StackReview(stack=hostile, base=None, head=None, invalid=hostile)
    review.notes.append(hostile)
    text = render_markdown([review], "main`|<b>")
    # Inside a code span HTML and links are shown as text; outside one nothing may act.
    prose = re.sub(r"`[^`\n]*`", "", text)
    assert "<img" not in prose and "<b>" not in prose and "[click](" not in prose and "\nnext" not in text
    assert prose.count("`") == 0, "every code span closed where we closed it"
    for line in text.splitlines():
        if line.startswith("|") and "invalid stack file" in line:
            cells = line.replace("\\|", "").split("|")
            assert len(cells) == 10, line  # 8 cells: the name's pipe does not make another column
    assert md("a|b") == "a\\|b" and md("<b>") == "&lt;b&gt;" and md("[x](y)") == "\\[x\\](y)"
    assert code("a`b|c") == "`a'b\\|c`"


def test_version_and_json_outputs(tmp_path, capsys):
    import json

    status, out, err = _main(capsys, "plan", "--stack", "tencent-entry", "--json", "--out", str(tmp_path))
    doc = json.loads(out)
    assert status == 0 and doc["version"] == 1 and doc["command"] == "plan" and doc["exit_status"] == 0
    [entry] = doc["stacks"]
    assert entry["status"] == "ok" and entry["stack"] == "tencent-entry" and Path(entry["plan"]).is_file()
    # the Slurm head node's Standard S5 has no public price: the summary says so, and the budget check says the
    # estimate is incomplete (advisory)
    assert entry["monthly_cost"]["currency"] == "CNY"
    assert entry["monthly_cost"]["unpriced_summary"] == "head node 1 × S5.LARGE8"
    assert [v["policy"] for v in entry["violations"]] == ["budget-covers-estimate"]
    status, out, err = _main(capsys, "check", "--json", str(tmp_path / "tencent-entry.json"))
    doc = json.loads(out)
    assert status == 0 and doc["command"] == "check" and doc["resources"] > 20
    assert [(v["policy"], v["enforcement"]) for v in doc["violations"]] == [("budget-covers-estimate", "advisory")]
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("gpu-cluster 0.")


# --- found by the adversarial review of the gate ---------------------------------------------------------

def _stack(tmp_path: Path, extra_top: str = "", extra_config: str = "") -> Path:
    text = (STACKS_DIR / "Pulumi.tencent-entry.yaml").read_text()
    text = text.replace("config:\n", f"{extra_top}config:\n{extra_config}", 1)
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(text)
    return path


def test_an_esc_environment_that_would_merge_settings_past_the_review_is_refused(tmp_path):
    from gpu_cluster.stackfile import StackFileError

    with pytest.raises(StackFileError, match="top-level key 'environment' is not allowed .a Pulumi ESC environment"):
        read_stack_file(_stack(tmp_path, extra_top="environment: [myorg/anything]\n"))
    with pytest.raises(StackFileError, match="top-level key 'foo' is not allowed; allowed: config, secretsprovider"):
        read_stack_file(_stack(tmp_path, extra_top="foo: bar\n"))
    assert read_stack_file(_stack(tmp_path, extra_top="secretsprovider: passphrase\n")).stack == "t"


@pytest.mark.parametrize("key", ["aws:defaultTags: {tags: {a: b}}", "aws:ignoreTags: {keys: [gpu-cluster:backup]}",
                                 "tencentcloud:domain: evil.example", "aws:skipRegionValidation: true"])
def test_provider_settings_no_review_sees_are_refused(tmp_path, key):
    from gpu_cluster.stackfile import StackFileError

    name = key.split(":")[0] + ":" + key.split(":")[1]
    with pytest.raises(StackFileError, match=f"provider setting '{name}' is not allowed"):
        read_stack_file(_stack(tmp_path, extra_config=f"  {key}\n"))
    assert read_stack_file(_stack(tmp_path, extra_config="  aws:profile: research\n")).config["aws:profile"] == "research"


def test_a_stack_in_stacks_may_not_name_a_price_file_outside_the_repository(tmp_path, monkeypatch):
    from gpu_cluster import stackfile
    from gpu_cluster.stackfile import StackFileError

    repo = tmp_path / "repo"
    (repo / "stacks").mkdir(parents=True)
    monkeypatch.setattr(stackfile, "STACKS_DIR", repo / "stacks")
    text = (STACKS_DIR / "Pulumi.tencent-entry.yaml").read_text()
    for value in ("/etc/passwd", "../../etc/hostname"):
        path = repo / "stacks" / "Pulumi.p.yaml"
        path.write_text(text.replace("config:\n", f"config:\n  gpu-cluster:prices: {value}\n", 1))
        with pytest.raises(StackFileError, match="points outside the repository"):
            read_stack_file(path)
    path.write_text(text.replace("config:\n", "config:\n  gpu-cluster:prices: ../prices/negotiated.yaml\n", 1))
    assert read_stack_file(path).config["gpu-cluster:prices"] == "../prices/negotiated.yaml"


def test_invisible_characters_and_autolinks_never_reach_the_review_as_such():
    text = "x\u202eevil\u2028next see https://evil.example www.phish.example @team #12 me@corp.example"
    out = md(text)
    assert "\u202e" not in out and "\u2028" not in out
    for linky in ("`https://evil.example`", "`www.phish.example`", "`@team`", "`#12`", "`me@corp.example`"):
        assert linky in out
    assert code("www.x.example") == "`www.x.example`"  # stack names go in code spans, which GitHub never links


def test_a_folder_named_like_a_stack_file_is_refused_not_taken_for_a_removal(tmp_path):
    from gpu_cluster.review import _refused_in_head

    (tmp_path / "stacks" / "Pulumi.evil.yaml").mkdir(parents=True)
    (tmp_path / "stacks" / "Pulumi.evil.yaml" / "Pulumi.inner.yaml").write_text("config: {}\n")
    (tmp_path / "stacks" / "Pulumi.fine.yaml").write_text("config: {}\n")
    refused = _refused_in_head(["evil", "fine", "gone"], tmp_path)
    assert set(refused) == {"evil"} and "is not a regular file" in refused["evil"]


def test_a_sides_renderer_gets_none_of_the_runners_step_files(monkeypatch):
    from gpu_cluster.review import side_env

    for name in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_TOKEN"):
        monkeypatch.setenv(name, "/tmp/x")
    env = side_env()
    assert not [k for k in env if k.startswith("GITHUB_")] and env["GPU_CLUSTER_JOBS"] == "1"


def test_an_offline_render_writes_nothing_and_plan_writes_only_under_out(tmp_path, monkeypatch, capsys):
    """The Tencent cost controls' code package is the one file a render used to write (into the checkout's
    build/): an offline render writes nothing now, and `plan --out DIR` only DIR. A real `pulumi up` writes
    the package to the user's cache folder, outside the checkout."""
    from components.tencentcloud.costcontrol import write_package

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    # tencent-scheduled without Slurm, whose windows are then the cost-controls function's (with Slurm, power saving's)
    stack = tmp_path / "stack" / "Pulumi.tencent-scheduled.yaml"
    stack.parent.mkdir()
    stack.write_text((STACKS_DIR / "Pulumi.tencent-scheduled.yaml").read_text().replace(
        "    idle_stop:\n", "    scheduler: none\n    idle_stop:\n      gpu_util_below_pct: 5\n", 1))
    before = {p for p in ROOT.rglob("*") if "__pycache__" not in p.parts and "venv" not in p.parts}
    status, out, err = _main(capsys, "plan", "--stack-file", str(stack), "--jobs", "1", "--out", str(tmp_path / "out"))
    after = {p for p in ROOT.rglob("*") if "__pycache__" not in p.parts and "venv" not in p.parts}
    assert status == 0 and after == before, sorted(map(str, after - before))[:5]
    assert not (tmp_path / "cache").exists() and not (tmp_path / "home").exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["tencent-scheduled.json",
                                                                   "tencent-scheduled.report.json"]
    plan = (tmp_path / "out" / "tencent-scheduled.json").read_text()
    assert '"zipFile": "~/.cache/gpu-cluster/tencent-cost-controls/cost-controls-' in plan
    monkeypatch.delenv("GPU_CLUSTER_OFFLINE_RENDER", raising=False)
    path = write_package(b"zip")
    assert path.startswith(str(tmp_path / "cache" / "gpu-cluster" / "tencent-cost-controls"))


def test_a_hostile_email_address_is_refused_by_its_length_and_never_backtracks():
    """Found by the re-check of the gate: x@....@ made the address pattern backtrack (quadratic: 23 s for
    60,000 characters). Addresses are at most 254 characters, and the pattern's domain labels exclude the
    dot between them, so no input makes it backtrack."""
    from components.spec import EMAIL_MAX, SpecError, _EMAIL, load_spec

    cluster = yaml.safe_load((STACKS_DIR / "Pulumi.aws-entry.yaml").read_text())["config"]["gpu-cluster:cluster"]
    cluster["budget"]["emails"] = ["x@" + "." * 100_000 + "@"]
    with pytest.raises(SpecError, match=f"e-mail addresses are at most {EMAIL_MAX} characters"):
        load_spec(cluster, {"aws": "us-east-1"})
    assert _EMAIL.pattern.count("[^@\\s.]") == 2 and "(?:\\.[^@\\s.]+)+" in _EMAIL.pattern
    assert [bool(_EMAIL.match(a)) for a in ("x@" + "." * 250 + "@", "a@b.c", "first.last@sub.example.co.uk", "a@b.")] == [
        False, True, True, False]


def test_a_program_that_fails_under_the_mocks_is_one_sentence_and_no_traceback():
    """A render that fails inside an Output's apply (found when Tencent user data outgrew its limit) leaves the
    registrations that waited on it holding the error; when `plan` renders the next stack in the same process,
    asyncio printed each with its traceback ("Future exception was never retrieved"), hundreds of lines after
    the one sentence that said what failed. Here the limit is lowered so that the render fails the same way."""
    script = ("import gc\n"
              "import components.cloudinit as cloudinit\n"
              "from gpu_cluster.render import read_stack_file, render, stack_path\n"
              "limit, cloudinit.USER_DATA_LIMIT = cloudinit.USER_DATA_LIMIT, 1000\n"
              "for stack in ('aws-entry', 'tencent-entry'):\n"
              "    try:\n        render(read_stack_file(stack_path(stack)))\n"
              "    except Exception as e:\n        print('failed:', type(e).__name__)\n"
              "cloudinit.USER_DATA_LIMIT = limit\n"
              "render(read_stack_file(stack_path('tencent-scheduled')))\n"
              "gc.collect()\nprint('rendered')\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "failed: RunError" in out.stdout and "rendered" in out.stdout, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "never retrieved" not in out.stderr, out.stderr[-2000:]
