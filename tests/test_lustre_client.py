"""The AWS Lustre client install, run against stub tools: the FSx repository's package for the running
kernel when there is one; otherwise a kernel of the same flavour that has one, booted once cloud-init is
done, but only when every driver the node runs is built for it.

The FSx repository builds `lustre-client-modules-<kernel>` per kernel and can trail the kernels the
images boot (FSx for Lustre user guide, "Installing the Lustre client", Ubuntu).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from components.aws.boot import LUSTRE_CLIENT_SH, REBOOT_UNIT, lustre_mount

RUNNING = "7.0.0-1012-aws"
COVERED = "6.8.0-1063-aws"
NVIDIA_PKG = "linux-modules-nvidia-570-server-open-{k}"

STUBS = {
    "uname": 'echo "$(cat "$STUB/kernel")"\n',
    "modprobe": 'if [ "$1" = -n ]; then [ -e "$STUB/lustre-loadable" ]; else echo "modprobe $*" >> "$STUB/log"; fi\n',
    "curl": "echo key\n",
    "gpg": 'out=""; while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done; cat > "$out"\n',
    # show: as apt does, success when any named package exists; pkgnames PREFIX: the available names.
    "apt-cache": r'''case "$1" in
  show) shift; for p in "$@"; do grep -qxF -- "$p" "$STUB/available" && exit 0; done; exit 100 ;;
  pkgnames) grep -- "^$2" "$STUB/available" || true ;;
esac
''',
    # update fails while $STUB/lists-locked holds a count above 0 (apt-daily holding the lists' lock).
    "apt-get": r'''echo "apt-get $*" >> "$STUB/log"
if [ "$1" = update ] && [ -s "$STUB/lists-locked" ]; then
  n=$(cat "$STUB/lists-locked")
  if [ "$n" -gt 0 ]; then echo $((n - 1)) > "$STUB/lists-locked"; echo "E: Could not get lock /var/lib/apt/lists/lock" >&2; exit 100; fi
fi
if [ "$1" = purge ]; then
  for p in "$@"; do grep -vxF -- "$p" "$STUB/installed" > "$STUB/installed.new" || true; mv "$STUB/installed.new" "$STUB/installed"; done
fi
if [ "$1" = install ]; then
  for p in "$@"; do
    case "$p" in -*|install) ;; *) grep -qxF -- "$p" "$STUB/available" || exit 100; echo "$p" >> "$STUB/installed" ;; esac
  done
fi
''',
    # -n MODULE: the running kernel's file (NVIDIA from a kernel-versioned package, EFA from DKMS);
    # -k KERNEL -n MODULE: its file for KERNEL, from $STUB/built lines "KERNEL MODULE [intree]".
    "modinfo": r'''if [ "$1" = -k ]; then
  if grep -qxF -- "$2 $4" "$STUB/built"; then
    case "$4" in nvidia) echo "/lib/modules/$2/kernel/nvidia-570/nvidia.ko" ;; *) echo "/lib/modules/$2/updates/dkms/$4.ko" ;; esac
  elif grep -qxF -- "$2 $4 intree" "$STUB/built"; then echo "/lib/modules/$2/kernel/drivers/$4.ko"
  else exit 1; fi
  exit 0
fi
grep -qxF -- "$2" "$STUB/drivers" || exit 1
case "$2" in nvidia) echo "/lib/modules/$(cat "$STUB/kernel")/kernel/nvidia-570/nvidia.ko" ;;
  *) echo "/lib/modules/$(cat "$STUB/kernel")/updates/dkms/$2.ko" ;; esac
''',
    "dpkg": r'''case "$2" in */nvidia.ko) echo "linux-modules-nvidia-570-server-open-$(cat "$STUB/kernel"): $2" ;; *) exit 1 ;; esac
''',
    # GRUB's 10_linux: the newest kernel first, the rest in the "Advanced options" submenu ($STUB/no-submenu: none).
    "update-grub": r''': > "$GRUB_CFG_STUB"
[ -e "$STUB/no-submenu" ] || echo "submenu 'Advanced options for Ubuntu' \$menuentry_id_option 'gnulinux-advanced' {" >> "$GRUB_CFG_STUB"
sed -n 's/^linux-image-//p' "$STUB/installed" | while read -r k; do echo "	menuentry 'Ubuntu, with Linux $k' {" >> "$GRUB_CFG_STUB"; done
''',
    "systemctl": 'echo "systemctl $*" >> "$STUB/log"\n',
    "sleep": 'echo "sleep $*" >> "$STUB/sleeps"\n',
}


@pytest.fixture
def node(tmp_path):
    bin_dir, stub = tmp_path / "bin", tmp_path / "stub"
    bin_dir.mkdir()
    stub.mkdir()
    for name, body in STUBS.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    (stub / "kernel").write_text(RUNNING + "\n")
    (stub / "drivers").write_text("nvidia\nefa\n")
    for name in ("log", "installed", "built", "available"):
        (stub / name).write_text("")
    paths = {"SWITCHED": tmp_path / "var/lustre-kernel", "PENDING": tmp_path / "run/reboot-pending",
             "GRUB_DROPIN": tmp_path / "grub.d-99.cfg", "GRUB_CFG": tmp_path / "grub.cfg",
             "KEYRING": tmp_path / "fsx.gpg", "SOURCES": tmp_path / "fsx.list"}
    script = LUSTRE_CLIENT_SH
    for name, path in paths.items():
        line = next(ln for ln in script.splitlines() if ln.startswith(f"{name}="))
        script = script.replace(line, f"{name}={path}")
    (tmp_path / "lustre-client").write_text(script)
    (tmp_path / "lustre-client").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB": str(stub), "GRUB_CFG_STUB": str(paths["GRUB_CFG"])}
    return tmp_path, stub, paths, env


def available(stub: Path, *packages: str) -> None:
    (stub / "available").write_text("".join(f"{p}\n" for p in packages))


def built(stub: Path, *pairs: str) -> None:
    (stub / "built").write_text("".join(f"{p}\n" for p in pairs))


def run(node) -> subprocess.CompletedProcess:
    root, _, _, env = node
    return subprocess.run([str(root / "lustre-client")], env=env, capture_output=True, text=True, timeout=60)


def installed(stub: Path) -> list[str]:
    return (stub / "installed").read_text().split()


def test_the_running_kernels_client_is_installed_when_the_repository_has_it(node):
    root, stub, paths, _ = node
    available(stub, f"lustre-client-modules-{RUNNING}")
    r = run(node)
    assert r.returncode == 0, r.stderr
    assert installed(stub) == [f"lustre-client-modules-{RUNNING}"]
    assert "modprobe lustre" in (stub / "log").read_text()
    assert not paths["GRUB_DROPIN"].exists() and not paths["PENDING"].exists()
    assert "fsx-lustre-client-repo.s3.amazonaws.com/ubuntu" in paths["SOURCES"].read_text()


def test_without_one_it_boots_the_newest_covered_kernel_once_cloud_init_is_done(node):
    root, stub, paths, _ = node
    newer_without_image = "6.8.0-1070-aws"
    available(stub, f"lustre-client-modules-{COVERED}", f"lustre-client-modules-{newer_without_image}",
              "lustre-client-modules-6.8.0-1063-generic", f"linux-image-{COVERED}", f"linux-headers-{COVERED}",
              f"linux-modules-extra-{COVERED}", NVIDIA_PKG.format(k=COVERED))
    built(stub, f"{COVERED} nvidia", f"{COVERED} efa")
    r = run(node)
    assert r.returncode == 0, r.stderr
    assert set(installed(stub)) == {f"linux-image-{COVERED}", f"linux-headers-{COVERED}", f"lustre-client-modules-{COVERED}",
                                    f"linux-modules-extra-{COVERED}", NVIDIA_PKG.format(k=COVERED)}
    assert paths["GRUB_DROPIN"].read_text() == f'GRUB_DEFAULT="Advanced options for Ubuntu>Ubuntu, with Linux {COVERED}"\n'
    assert paths["SWITCHED"].read_text() == f"{COVERED}\n" and paths["PENDING"].exists()
    assert f"systemctl start --no-block {REBOOT_UNIT}" in (stub / "log").read_text()
    assert f"booting kernel {COVERED}" in r.stdout


def test_it_stays_on_its_kernel_when_a_driver_is_not_built_for_the_other(node):
    root, stub, paths, _ = node
    available(stub, f"lustre-client-modules-{COVERED}", f"linux-image-{COVERED}", f"linux-headers-{COVERED}",
              NVIDIA_PKG.format(k=COVERED))
    built(stub, f"{COVERED} nvidia")  # EFA's DKMS build failed
    r = run(node)
    assert r.returncode == 1
    assert f"driver efa is not built for kernel {COVERED}, so the node stays on kernel {RUNNING}" in r.stderr
    assert not paths["GRUB_DROPIN"].exists() and not paths["PENDING"].exists()
    assert "systemctl" not in (stub / "log").read_text()
    assert f"linux-image-{COVERED}" not in installed(stub), "removed, so no later reboot boots it without drivers"


def test_the_kernels_own_efa_module_is_not_the_one_dkms_builds(node):
    """The running EFA module comes from the EFA installer (DKMS, under updates/); the other kernel's
    in-tree efa.ko does not count."""
    root, stub, paths, _ = node
    available(stub, f"lustre-client-modules-{COVERED}", f"linux-image-{COVERED}", f"linux-headers-{COVERED}",
              NVIDIA_PKG.format(k=COVERED))
    built(stub, f"{COVERED} nvidia", f"{COVERED} efa intree")
    r = run(node)
    assert r.returncode == 1 and f"driver efa is not built for kernel {COVERED}" in r.stderr
    assert not paths["PENDING"].exists()


def test_a_kernel_missing_a_package_is_skipped_for_an_older_complete_one(node):
    """Every package of a candidate is checked on its own (apt-cache show of several succeeds when one
    exists): the newest kernel lacks its NVIDIA package, the next one has everything."""
    root, stub, paths, _ = node
    older = "6.8.0-1057-aws"
    available(stub, f"lustre-client-modules-{COVERED}", f"linux-image-{COVERED}", f"linux-headers-{COVERED}",
              f"lustre-client-modules-{older}", f"linux-image-{older}", f"linux-headers-{older}",
              NVIDIA_PKG.format(k=older))
    built(stub, f"{older} nvidia", f"{older} efa")
    r = run(node)
    assert r.returncode == 0, r.stderr
    assert paths["SWITCHED"].read_text() == f"{older}\n" and NVIDIA_PKG.format(k=older) in installed(stub)


def test_no_grub_submenu_entry_for_the_kernel_leaves_the_node_as_it_was(node):
    root, stub, paths, _ = node
    (stub / "no-submenu").write_text("")
    available(stub, f"lustre-client-modules-{COVERED}", f"linux-image-{COVERED}", f"linux-headers-{COVERED}",
              NVIDIA_PKG.format(k=COVERED))
    built(stub, f"{COVERED} nvidia", f"{COVERED} efa")
    r = run(node)
    assert r.returncode == 1 and "GRUB has no entry 'Advanced options for Ubuntu>Ubuntu, with Linux" in r.stderr
    assert not paths["GRUB_DROPIN"].exists() and not paths["PENDING"].exists()
    assert f"linux-image-{COVERED}" not in installed(stub)


def test_it_switches_once_never_in_a_loop(node):
    root, stub, paths, _ = node
    paths["SWITCHED"].parent.mkdir(parents=True)
    paths["SWITCHED"].write_text(f"{COVERED}\n")
    available(stub, f"lustre-client-modules-{COVERED}", f"linux-image-{COVERED}", f"linux-headers-{COVERED}")
    r = run(node)
    assert r.returncode == 1 and f"switched to kernel {COVERED} for one" in r.stderr
    assert installed(stub) == []


def test_no_covered_kernel_of_its_flavour_says_so(node):
    root, stub, paths, _ = node
    available(stub, "lustre-client-modules-6.8.0-1063-generic", "linux-image-6.8.0-1063-generic",
              "linux-headers-6.8.0-1063-generic", f"lustre-client-modules-{COVERED}")  # no aws image in the archive
    r = run(node)
    assert r.returncode == 1
    assert f"no client for kernel {RUNNING}, nor for any aws kernel in the Ubuntu archive" in r.stderr


def test_the_reboot_unit_waits_for_cloud_init_and_ships_with_the_mount():
    unit = next(f for f in lustre_mount("fs@tcp:/m").files if f["path"].endswith(REBOOT_UNIT))
    assert "After=cloud-final.service gpu-cluster-data.service" in unit["content"] and "ExecStart=/usr/bin/systemctl reboot" in unit["content"]
    assert "[Install]" not in unit["content"], "started only by the client script, never at boot"


@pytest.mark.parametrize("locked, ok", [(3, True), (60, False)])
def test_apt_get_update_waits_out_a_held_package_lists_lock(node, locked, ok):
    """apt-get update takes the package lists' lock without waiting, and apt-daily holds it at many a
    first boot: the script tries again every 10 s for 10 minutes, then fails by name."""
    root, stub, _, _ = node
    available(stub, f"lustre-client-modules-{RUNNING}")
    (stub / "lists-locked").write_text(f"{locked}\n")
    r = run(node)
    updates = (stub / "log").read_text().count("apt-get update")
    sleeps = (stub / "sleeps").read_text().splitlines() if (stub / "sleeps").exists() else []
    if ok:
        assert r.returncode == 0, r.stderr
        assert (updates, sleeps) == (4, ["sleep 10"] * 3)
        assert installed(stub) == [f"lustre-client-modules-{RUNNING}"]
    else:
        assert r.returncode == 1 and "apt-get update failed for 10 minutes" in r.stderr
        assert updates == 60 and installed(stub) == []
