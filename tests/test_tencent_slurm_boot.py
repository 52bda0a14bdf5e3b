"""A Tencent GPU node's Slurm boot kept in the cluster's boot bucket (components/slurm/bundle.py) and fetched by its
user data (components/tencentcloud/boot.py slurm_fetch_step): the script writes exactly the files the boot parts
hold; the fetch signs its request as COS does, checks the hash the user data pins, and runs nothing else."""

from __future__ import annotations

import http.server
import json
import os
import re
import stat
import subprocess
import threading
import urllib.parse
from pathlib import Path

import pytest

from components import catalog
from components.cloudinit import USER_DATA_LIMIT, decode
from components.slurm import SlurmCluster, node_boot_parts
from components.slurm.bundle import END, bundle_script, sha256, unpack
from components.tencentcloud.boot import COS_GET_PY, SLURM_BOOT_DONE, slurm_fetch_script
from conftest import gpu_nodes, render_plan

TC_INSTANCE = "tencentcloud:Instance/instance:Instance"
OBJECT = "tencentcloud:Cos/bucketObject:BucketObject"


def _cluster(**kw) -> SlurmCluster:
    args = dict(name="tc-large", cloud="tencentcloud", region="ap-shanghai", nodes=2, head_address="10.50.0.10",
                shape=catalog.shape("tencentcloud", "HCCPNV6.96XLARGE2304"), munge_secret_id="tc-large-munge-key",
                os="el8-openhpc", lustre=True, data_disk=True)
    return SlurmCluster(**{**args, **kw})


def test_the_script_writes_every_file_of_the_parts_with_its_mode(tmp_path):
    parts = node_boot_parts(_cluster(), 1)
    script = bundle_script(parts, "GPU node tc-large-node-1")
    assert bundle_script(parts, "GPU node tc-large-node-1") == script  # the same parts, the same bytes and hash
    # Only the writing part runs here: its steps and commands (dnf, systemctl) follow the last file.
    writing = script[:script.rindex(END + "\n") + len(END) + 1]
    out = subprocess.run(["bash", "-c", writing], env={**os.environ, "GPU_CLUSTER_TEST_ROOT": str(tmp_path)},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    expected = {f["path"]: (f["content"], int(f["permissions"], 8)) for f in parts.files}
    expected.update({f"/usr/local/sbin/{s.name}": (s.script, 0o755) for s in parts.steps})
    written = {"/" + str(p.relative_to(tmp_path)): (p.read_text(), stat.S_IMODE(p.stat().st_mode))
               for p in tmp_path.rglob("*") if p.is_file()}
    assert written == expected
    assert unpack(script) == {p: c for p, (c, _) in expected.items()}
    # then the steps (the package install first) and the commands, in the parts' order, each run even if one failed
    tail = script[len(writing):].splitlines()
    assert tail[2] == "run /usr/local/sbin/gpu-cluster-slurm-packages"
    assert tail[3:-1] == ["run " + " ".join(c) for c in parts.commands] and tail[-1] == 'exit "$failed"'


def test_a_failing_command_does_not_keep_the_next_from_running(tmp_path):
    """A node-setup that fails must not keep slurmd and the health-recheck timer from being enabled: they repair it."""
    from components.slurm.boot import BootParts

    parts = BootParts(packages=(), files=({"path": "/x/f", "permissions": "0644", "content": "a\n"},),
                      commands=(("false",), ("touch", str(tmp_path / "after"))))
    out = subprocess.run(["bash", "-c", bundle_script(parts, "t")], capture_output=True, text=True,
                         env={**os.environ, "GPU_CLUSTER_TEST_ROOT": str(tmp_path)})
    assert out.returncode == 1 and (tmp_path / "after").exists() and (tmp_path / "x/f").read_text() == "a\n"
    assert "gpu-cluster: false failed (exit 1)" in out.stderr


def test_a_file_that_would_end_the_here_document_is_refused():
    from components.slurm.boot import BootParts

    bad = BootParts(packages=(), commands=(), files=({"path": "/etc/x", "permissions": "0644",
                                                      "content": f"a\n{END}\nrm -rf /\n"},))
    with pytest.raises(ValueError, match="no line GPU_CLUSTER_EOF"):
        bundle_script(bad, "x")
    with pytest.raises(ValueError, match="cannot be written"):
        bundle_script(BootParts(packages=(), commands=(), files=(
            {"path": "/etc/x y", "permissions": "0644", "content": "a\n"},)), "x")


def test_the_signature_is_the_one_cos_python_sdk_computes():
    """A vector from cos-python-sdk-v5 1.9.44 (qcloud_cos/cos_auth.py CosS3Auth, the request signed on its host
    header, no parameters, sign time 1764899940;1764900600), computed with the SDK for these inputs."""
    ns: dict = {"__name__": "cos_get"}
    exec(COS_GET_PY, ns)
    auth = ns["authorization"]("AKIDexampleTmpSecretId", "exampleTmpSecretKey", "1764899940;1764900600", "get",
                               "/slurm/tc-large-node-0-0123456789abcdef.sh",
                               "tc-large-boot-1250000000.cos.ap-shanghai.myqcloud.com")
    assert auth == ("q-sign-algorithm=sha1&q-ak=AKIDexampleTmpSecretId&q-sign-time=1764899940;1764900600"
                    "&q-key-time=1764899940;1764900600&q-header-list=host&q-url-param-list="
                    "&q-signature=47f452082450773a91fbae863f9ca6b3cef98605")


class _Cloud(http.server.BaseHTTPRequestHandler):
    """The metadata service (the role's temporary keys) and COS (one object), checking the signature."""

    objects: dict[str, bytes] = {}
    seen: list = []

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/meta/cam/security-credentials/tc-large-node":
            body = json.dumps({"TmpSecretId": "AKIDtmp", "TmpSecretKey": "tmpkey", "Token": "tok", "Code": "Success"})
            return self._answer(200, body.encode())
        ns: dict = {"__name__": "cos_get"}
        exec(COS_GET_PY, ns)
        got = self.headers.get("Authorization", "")
        key_time = re.search(r"q-key-time=([0-9;]+)", got)
        want = ns["authorization"]("AKIDtmp", "tmpkey", key_time.group(1) if key_time else "", "get", path,
                                   self.headers["Host"])
        self.seen.append((path, got == want, self.headers.get("x-cos-security-token")))
        if got != want or self.headers.get("x-cos-security-token") != "tok":
            return self._answer(403, b"<Error><Code>AccessDenied</Code></Error>")
        if path[1:] not in self.objects:
            return self._answer(404, b"<Error><Code>NoSuchKey</Code></Error>")
        return self._answer(200, self.objects[path[1:]])

    def _answer(self, code: int, body: bytes):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def cloud():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Cloud)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Cloud.objects, _Cloud.seen = {}, []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_node_fetches_its_boot_with_its_role_checks_the_hash_and_runs_it(tmp_path, cloud):
    key = "slurm/tc-large-node-0-0123456789abcdef.sh"
    boot = "#!/bin/bash\necho ran > \"$GPU_CLUSTER_TEST_ROOT/ran\"\n"
    _Cloud.objects[key] = boot.encode()
    env = {**os.environ, "GPU_CLUSTER_TEST_ROOT": str(tmp_path), "GPU_CLUSTER_METADATA_URL": f"{cloud}/meta",
           "GPU_CLUSTER_COS_ENDPOINT": cloud}

    def fetch(sha: str, tries_path: Path) -> subprocess.CompletedProcess:
        script = slurm_fetch_script(bucket="tc-large-boot-1250000000", key=key, sha256=sha, region="ap-shanghai",
                                    role="tc-large-node")
        tries_path.write_text(script.replace("sleep 15", "sleep 0"))
        return subprocess.run(["bash", str(tries_path)], env=env, capture_output=True, text=True, timeout=120)

    done = tmp_path / SLURM_BOOT_DONE.lstrip("/")
    r = fetch(sha256(boot), tmp_path / "fetch")
    assert r.returncode == 0 and (tmp_path / "ran").read_text() == "ran\n", r.stderr
    assert _Cloud.seen == [(f"/{key}", True, "tok")] and done.exists()  # done: the unit runs it no more
    # A boot that fails is not marked done: the unit runs it again (at the next boot, and every 15 min).
    done.unlink()
    failing = "#!/bin/bash\nexit 3\n"
    _Cloud.objects[key] = failing.encode()
    r = fetch(sha256(failing), tmp_path / "fetch")
    assert r.returncode != 0 and not done.exists() and "runs again at the next boot" in r.stderr
    _Cloud.objects[key] = boot.encode()
    # An object that is not the one the user data pins is never run.
    (tmp_path / "ran").unlink()
    _Cloud.objects[key] = b"#!/bin/bash\necho evil > \"$GPU_CLUSTER_TEST_ROOT/ran\"\n"
    r = fetch(sha256(boot), tmp_path / "fetch")
    assert r.returncode != 0 and not (tmp_path / "ran").exists()
    assert "is not the Slurm boot this node was made with" in r.stderr


def test_every_tencent_machine_pins_the_object_it_fetches(sample_plan):
    """Each GPU node, and the head node, names its own Slurm boot object and pins its hash; the key names the hash."""
    plan = sample_plan("tencent-large")
    objects = {o.inputs["key"]: o for o in plan.of_type(OBJECT)}
    nodes = sorted(gpu_nodes(plan, TC_INSTANCE), key=lambda r: r.name)
    [head] = [r for r in plan.of_type(TC_INSTANCE) if r not in nodes]
    assert len(objects) == len(nodes) + 1 == 3
    for name, machine in [*((f"node-{i}", n) for i, n in enumerate(nodes)), ("head", head)]:
        document = decode(machine.inputs["userData"])
        [key] = set(re.findall(r" (slurm/\S+\.sh) ", document))
        obj = objects.pop(key)
        assert key.startswith(f"slurm/tc-large-{name}-") and key[-19:-3] == sha256(obj.inputs["content"])[:16]
        assert f"{sha256(obj.inputs['content'])}  $work/slurm-boot" in document
        assert obj.inputs["acl"] == "private" and obj.inputs["bucket"] == "tc-large-boot-1250000000"
        assert obj.retain_on_delete  # a node made earlier still fetches its own when the plan moves on
        files = unpack(obj.inputs["content"])
        if name == "head":
            assert "/etc/slurm/slurm.conf" in files and machine.inputs["camRoleName"] == "tc-large-head"
        else:
            assert f"NODE_INDEX='{name[-1]}'" in files["/opt/gpu-cluster/bin/node-identity"]
            assert machine.inputs["camRoleName"] == "tc-large-node"
        assert machine.dependencies and any(obj.urn == d for d in machine.dependencies)
    assert not objects
    [bucket] = [b for b in plan.of_type("tencentcloud:Cos/bucket:Bucket") if b.name == "tc-large-boot"]
    assert bucket.protect and bucket.inputs["acl"] == "private" and bucket.inputs["encryptionAlgorithm"] == "AES256"


@pytest.mark.parametrize("changes", [{}, {"purchase": "mixed", "nodes": 4}])
def test_the_largest_tencent_nodes_fit_their_user_data_with_room_to_spare(changes):
    """Driver, fabric manager, RDMA, CFS Turbo, a data disk and spot handling: the user data holds the fetch, not the
    Slurm files, so it stays far below Tencent's 16 KB of base64."""
    plan = render_plan("tencent-large", changes)
    sizes = [len(n.inputs["userData"]) for n in gpu_nodes(plan, TC_INSTANCE)]
    assert sizes and max(sizes) < USER_DATA_LIMIT * 0.6, sizes


def test_the_slurm_boot_runs_from_a_unit_until_it_has_run_through(sample_plan):
    """At first boot after the machine's own steps, then at every boot and every 15 min until it marks itself done:
    a package mirror or the bucket out of reach for a while does not leave a machine without Slurm for good."""
    from components.cloudinit import decode
    from conftest import load_yaml

    plan = sample_plan("tencent-entry")
    for machine in plan.of_type(TC_INSTANCE):
        doc = load_yaml(decode(machine.inputs["userData"]))
        units = {f["path"]: f["content"] for f in doc["write_files"] if f["path"].startswith("/etc/systemd/system/")}
        unit = units["/etc/systemd/system/gpu-cluster-slurm-boot.service"]
        assert f"ConditionPathExists=!{SLURM_BOOT_DONE}" in unit and "WantedBy=multi-user.target" in unit
        assert "OnUnitInactiveSec=15min" in units["/etc/systemd/system/gpu-cluster-slurm-boot.timer"]
        runcmd = doc["runcmd"]
        start = runcmd.index(["systemctl", "start", "gpu-cluster-slurm-boot.service"])
        own = [i for i, c in enumerate(runcmd) if c[0].startswith("/usr/local/sbin/")]
        assert all(i < start for i in own) and ["systemctl", "start", "gpu-cluster-slurm-boot.timer"] in runcmd
