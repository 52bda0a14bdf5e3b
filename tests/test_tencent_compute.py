"""Tencent compute: shapes per tier, HPC cluster packing, zone, purchase mapping, boot config."""

import pytest

from components import catalog
from components.cloudinit import decode, render
from components.tencentcloud import boot
from conftest import gpu_nodes, load_yaml

INSTANCE = "tencentcloud:Instance/instance:Instance"
HPC = "tencentcloud:Cvm/hpcCluster:HpcCluster"


def inputs_of(plan, type_):
    """The GPU nodes' inputs (the Slurm head node is an instance too: tests/test_slurm_wiring.py)."""
    return [r.inputs for r in gpu_nodes(plan, type_)]


def document(inputs: dict) -> dict:
    """A node's #cloud-config, as cloud-init reads it from the compressed user_data."""
    return load_yaml(decode(inputs["userData"]))


def test_large_packs_every_node_into_one_hpc_cluster_in_the_zone(sample_plan):
    plan = sample_plan("tencent-large")
    hpc = plan.one(HPC)
    assert hpc.inputs["zone"] == "ap-shanghai-5"
    nodes = inputs_of(plan, INSTANCE)
    assert len(nodes) == 2
    assert all(n["hpcClusterId"] == hpc.id for n in nodes)
    assert all(n["instanceType"] == "HCCPNV6.96XLARGE2304" for n in nodes)
    # Tencent placement groups spread instances apart: none is used for packing.
    assert not any(r.type.startswith("tencentcloud:Placement/") for r in plan)
    assert not any("placementGroupId" in n for n in nodes)
    assert plan.stack is not None


def test_large_keeps_everything_in_one_zone(sample_plan):
    plan = sample_plan("tencent-large")
    zones = [n["availabilityZone"] for n in inputs_of(plan, INSTANCE)]
    zones += [d["availabilityZone"] for d in inputs_of(plan, "tencentcloud:Cbs/storage:Storage")]
    zones += [plan.one("tencentcloud:Cfs/fileSystem:FileSystem").inputs["availabilityZone"],
              plan.one("tencentcloud:Subnet/instance:Instance").inputs["availabilityZone"],
              plan.one(HPC).inputs["zone"]]
    assert set(zones) == {"ap-shanghai-5"}


def test_mid_is_four_a100_gt4_from_the_catalog(sample_plan):
    nodes = inputs_of(sample_plan("tencent-mid"), INSTANCE)
    assert [n["instanceType"] for n in nodes] == ["GT4.20XLARGE474"] * 2
    shape = catalog.shape("tencentcloud", "GT4.20XLARGE474")
    assert (shape.gpu, shape.gpu_count, shape.interconnect) == ("A100", 4, "nvlink")
    assert all("hpcClusterId" not in n for n in nodes)
    assert sample_plan("tencent-mid").of_type(HPC) == []


def test_entry_is_one_gn7_t4(sample_plan):
    (node,) = inputs_of(sample_plan("tencent-entry"), INSTANCE)
    assert node["instanceType"] == "GN7.2XLARGE32"
    assert catalog.shape("tencentcloud", "GN7.2XLARGE32").gpu == "T4"


def test_nodes_are_private_with_an_hssd_root_disk_of_root_gb(sample_plan):
    (node,) = inputs_of(sample_plan("tencent-entry"), INSTANCE)
    assert node["allocatePublicIp"] is False
    assert node["systemDiskType"] == "CLOUD_HSSD" and node["systemDiskSize"] == 100
    assert node["instanceChargeType"] == "POSTPAID_BY_HOUR" and "spotInstanceType" not in node
    assert node["disableApiTermination"] is False
    assert node["imageId"] == "img-487zeit5"
    assert node["tags"]["gpu-cluster:tier"] == "entry"


def test_system_disk_is_what_the_zone_offers_the_shape_and_critical_enables_termination_protection(sample_plan):
    plan = sample_plan("tencent-large")
    for node in inputs_of(plan, INSTANCE):
        # The mock's zone offers Enhanced SSD system disks for HCCPNV6 (the type Tencent's own HCC guide uses).
        assert node["systemDiskType"] == "CLOUD_HSSD" and node["systemDiskSize"] == 500
        assert node["disableApiTermination"] is True


def test_system_disk_choice_and_unsold_shapes():
    from types import SimpleNamespace as N

    import pulumi

    from components.tencentcloud.compute import system_disk_type

    def offer(kinds, available=True):
        return N(instance_type="HCCPNV6.96XLARGE2304", cbs_configs=[
            N(disk_type=k, available=available, disk_usage="SYSTEM_DISK") for k in kinds])

    assert system_disk_type([offer(["CLOUD_PREMIUM", "CLOUD_BSSD"])], "HCCPNV6.96XLARGE2304", "z", True) == "CLOUD_BSSD"
    # An HCC shape with no cloud system disk on offer: its local disk, as the provider's HCC test uses.
    assert system_disk_type([offer([])], "HCCPNV6.96XLARGE2304", "z", True) == "LOCAL_BASIC"
    with pytest.raises(pulumi.RunError, match="offers none of the system disks"):
        system_disk_type([offer(["CLOUD_HSSD"], available=False)], "HCCPNV6.96XLARGE2304", "z", False)
    with pytest.raises(pulumi.RunError, match="is not sold in ap-shanghai-5"):
        system_disk_type([], "HCCPNV6.96XLARGE2304", "ap-shanghai-5", True)


def test_spot_and_mixed_map_to_spotpaid_with_a_max_price(render_cluster):
    spot = inputs_of(render_cluster("tencent-mid", {"purchase": "spot", "storage": {"scratch": "none"}}), INSTANCE)
    assert all(n["instanceChargeType"] == "SPOTPAID" and n["spotInstanceType"] == "ONE-TIME"
               and float(n["spotMaxPrice"]) > 0 for n in spot)
    # Registration order is not program order (inputs resolve asynchronously): go by node name.
    nodes = sorted(gpu_nodes(render_cluster("tencent-mid", {"purchase": "mixed", "nodes": 3, "storage": {"scratch": "none"}}),
                             INSTANCE), key=lambda r: r.name)
    mixed = [r.inputs for r in nodes]
    assert [r.name.rsplit("-", 1)[-1] for r in nodes] == ["0", "1", "2"]
    assert [n["instanceChargeType"] for n in mixed] == ["POSTPAID_BY_HOUR", "SPOTPAID", "SPOTPAID"]
    assert "spotMaxPrice" not in mixed[0]


def test_user_data_is_cloud_config_mounting_turbo_and_installing_the_driver(sample_plan):
    plan = sample_plan("tencent-mid")
    target = plan.stack.outputs["cfs_mount_target"]
    disks = {r.name.rsplit("-", 1)[-1]: r.id for r in plan.of_type("tencentcloud:Cbs/storage:Storage")}
    for node in gpu_nodes(plan, INSTANCE):
        inputs = node.inputs
        assert "userDataRaw" not in inputs
        doc = document(inputs)
        assert decode(inputs["userData"]).startswith("#cloud-config\n")
        lustre = [m for m in doc["mounts"] if m[1] == "/lustre"]
        assert len(lustre) == 1 and lustre[0][2] == "lustre" and lustre[0][0] == target
        assert "@tcp0:/" in target and target.endswith("/cfs")
        files = {f["path"]: f["content"] for f in doc["write_files"]}
        assert "cfs_turbo_client_setup" in files["/usr/local/sbin/gpu-cluster-lustre-client"]
        assert "auto_install.sh" in files["/usr/local/sbin/gpu-cluster-gpu-driver"]
        # Each node's document names its own data disk by id.
        assert f"echo {disks[node.name.rsplit('-', 1)[-1]]}" in files["/usr/local/sbin/gpu-cluster-data"]
        assert inputs["dataDisks"] == [{"dataDiskType": "CLOUD_HSSD", "dataDiskSize": 1000,
                                        "deleteWithInstance": True, "encrypt": True}]


def test_the_image_is_the_newest_from_the_lookups_list(sample_plan):
    """The provider returns images only in `images`, never as a top-level image_id
    (data_source_tc_images.go): the node's image is the list's first, and an empty list is a sentence."""
    import pulumi

    from components.tencentcloud.cluster import PUBLIC_IMAGE_OS, first_image

    (node,) = inputs_of(sample_plan("tencent-entry"), INSTANCE)
    assert node["imageId"] == "img-487zeit5"
    with pytest.raises(pulumi.RunError, match="no public image"):
        first_image([], "GN7.2XLARGE32")
    assert PUBLIC_IMAGE_OS.startswith("TencentOS Server 3.1")


def test_own_image_skips_the_driver_installer(render_cluster):
    (node,) = inputs_of(render_cluster("tencent-entry", {"image_id": "img-abcd1234"}), INSTANCE)
    assert node["imageId"] == "img-abcd1234"
    assert "auto_install.sh" not in decode(node["userData"])


def test_shapes_with_local_nvme_stripe_them_at_boot():
    shape = catalog.shape("tencentcloud", "HCCPNV4h.48XLARGE1024")
    doc = load_yaml(render(boot.boot_config(shape=shape, scratch="nvme", lustre_source=None, install_driver=False)))
    assert any(f["path"] == "/usr/local/sbin/gpu-cluster-scratch" and "EXPECTED=4" in f["content"]
               for f in doc["write_files"])
    assert "mounts" not in doc


def test_critical_mixed_protects_only_the_on_demand_node(render_cluster):
    plan = render_cluster("tencent-mid", {"criticality": "critical", "purchase": "mixed", "nodes": 3,
                                          "storage": {"scratch": "none"}})
    nodes = sorted(gpu_nodes(plan, INSTANCE), key=lambda r: r.name)
    assert [n.inputs["instanceChargeType"] for n in nodes] == ["POSTPAID_BY_HOUR", "SPOTPAID", "SPOTPAID"]
    assert [n.inputs["disableApiTermination"] for n in nodes] == [True, False, False]


def test_nodes_keep_their_image_and_boot_config_when_they_change():
    from conftest import rendered, slurm_stack_with

    regs = rendered(slurm_stack_with("tencent-large")).registrations
    nodes = [r for r in regs if r.type == INSTANCE and r.inputs["tags"].get("gpu-cluster:role") != "head"]
    # userDataRaw stays ignored for nodes made before the user data was compressed (they hold it there); the
    # system disk type, looked up again at every run, would force-stop a node to resize its disk if it changed.
    # Slurm starts and stops them (power saving): a refresh that reads a stopped node must not start it again.
    assert len(nodes) == 2 and all(r.ignore_changes == ["imageId", "userDataRaw", "userData", "systemDiskType",
                                                        "runningFlag"] for r in nodes)
    # The head node keeps its image and disk type; a changed boot config replaces it (components/tencentcloud/head.py).
    (head,) = [r for r in regs if r.type == INSTANCE and r not in nodes]
    assert head.ignore_changes == ["imageId", "systemDiskType"] and head.inputs["userDataReplaceOnChange"] is True
    # HCC nodes wait up to an hour for RUNNING (the provider's default is 15 minutes); nothing else changes.
    from components.tencentcloud.compute import HCC_CREATE_TIMEOUT

    assert all(r.custom_timeouts == {"create": HCC_CREATE_TIMEOUT} == {"create": "60m"} for r in nodes)
    assert not [r for r in regs if r.custom_timeouts and r not in nodes]
    entry = [r for r in rendered(slurm_stack_with("tencent-entry")).registrations if r.type == INSTANCE]
    assert entry and not [r for r in entry if r.custom_timeouts], "not an HCC shape: the provider's wait"


def test_the_turbo_file_system_ignores_what_its_update_refuses(sample_plan):
    """Read copies net_interface, cidr_block and ccn_id back, Update refuses any change to them (and capacity)."""
    from conftest import rendered, stack_with

    [fs] = [r for r in rendered(stack_with("tencent-large")).registrations if r.type == "tencentcloud:Cfs/fileSystem:FileSystem"]
    assert fs.ignore_changes == ["capacity", "netInterface", "cidrBlock", "ccnId"]


def test_data_disk_is_found_by_its_id_never_by_size(sample_plan):
    for node in inputs_of(sample_plan("tencent-mid"), INSTANCE):
        doc = document(node)
        (script,) = [f["content"] for f in doc["write_files"] if f["path"] == "/usr/local/sbin/gpu-cluster-data"]
        assert "echo disk-" in script and "getsize64" not in script
        assert ["systemctl", "enable", "--now", "--no-block", "gpu-cluster-data.service"] in doc["runcmd"]


def _rdma_run(tmp_path, devices: dict[str, tuple[str, str]], agent_active: bool = True):
    """The HCC RDMA step against a rooted sysfs: devices name → (port state, GID at index 3); a stub systemctl."""
    import subprocess

    from components import catalog
    from components.tencentcloud.boot import rdma_step

    root = tmp_path / "root"
    for name, (state, gid) in devices.items():
        port = root / f"sys/class/infiniband/{name}/ports/1"
        (port / "gids").mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        if gid:
            (port / "gids/3").write_text(gid + "\n")
    (root / "etc").mkdir(parents=True)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "systemctl").write_text(f"#!/bin/bash\nexit {0 if agent_active else 3}\n")
    (stubs / "sleep").write_text("#!/bin/bash\n")
    for f in stubs.iterdir():
        f.chmod(0o755)
    script = tmp_path / "rdma"
    script.write_text(rdma_step(catalog.shape("tencentcloud", "HCCPNV6.96XLARGE2304")).script)
    import os
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "GPU_CLUSTER_TEST_ROOT": str(root)}
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30), root


GID = "fe80:0000:0000:0000:5054:00ff:fe12:3456"


def test_hcc_nodes_check_rdma_and_write_nccl_settings_for_every_process(tmp_path, sample_plan):
    """HCC nodes (every scheduler) boot a step that waits for rdma-agent, proves the catalog's count of RDMA devices
    (HCCPNV6: 8 bond NICs, TKE's rdma-agent documentation) each ACTIVE with a GID at NCCL_IB_GID_INDEX, and writes
    /etc/nccl.conf from the catalog's fabric row; other shapes have no such step."""
    from components.slurm.fabric import fabric

    r, root = _rdma_run(tmp_path, {f"mlx5_bond_{i}": ("4: ACTIVE", GID) for i in range(8)})
    assert r.returncode == 0 and "8 RDMA devices ACTIVE" in r.stdout, r.stderr
    conf = dict(line.split("=", 1) for line in (root / "etc/nccl.conf").read_text().splitlines())
    assert conf == fabric("tencentcloud", "HCCPNV6.96XLARGE2304").nccl_env and conf["NCCL_IB_GID_INDEX"] == "3"
    for devices, agent, reason in (
            ({"mlx5_bond_0": ("1: DOWN", GID)}, True, "mlx5_bond_0 port 1 is 1: DOWN, not ACTIVE"),
            ({"mlx5_bond_0": ("4: ACTIVE", "0000:0000:0000:0000:0000:0000:0000:0000")}, True, "has no GID at index 3"),
            ({}, True, "0 RDMA devices, 8 expected"),
            ({f"mlx5_bond_{i}": ("4: ACTIVE", GID) for i in range(7)}, True, "7 RDMA devices, 8 expected"),
            ({"mlx5_bond_0": ("4: ACTIVE", GID)}, False, "rdma-agent is not active")):
        r, _ = _rdma_run(tmp_path / reason.replace(" ", "-").replace(":", ""), devices, agent)
        assert r.returncode == 1 and reason in r.stderr, (reason, r.stderr)
    import json

    large = [json.dumps(document(n)) for n in inputs_of(sample_plan("tencent-large"), INSTANCE)]
    entry = [json.dumps(document(n)) for n in inputs_of(sample_plan("tencent-entry"), INSTANCE)]
    assert large and all("gpu-cluster-rdma" in d for d in large)
    assert entry and not [d for d in entry if "gpu-cluster-rdma" in d]
