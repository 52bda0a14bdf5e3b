"""The operating systems the Slurm boot installs on, as data: package names, where Slurm comes from, and the
cgroup plugin. One head node and its GPU nodes always run the same one, so slurmctld and slurmd are the same
Slurm release (Slurm's rule: slurmctld not older than slurmd, within the supported span: slurm.schedmd.com/
upgrades.html).

- `ubuntu-24.04`: the distribution's own Slurm 23.11.4 (packages.ubuntu.com/noble/slurmd), installed by
  cloud-init's package module. AWS nodes, and Tencent nodes whose stack names an Ubuntu `image_id`.
- `el8-openhpc`: TencentOS Server 3.1, Tencent's default public image (RHEL 8 compatible). Its own
  repositories carry no Slurm, and EPEL 8 only 20.11, which has no cgroup/v2 plugin and is out of support.
  OpenHPC 2.8 (openhpc/ohpc tag v2.8.GA, components/rms/slurm/SPECS/slurm.spec) builds Slurm 23.11.4 for EL 8:
  the release Ubuntu 24.04 ships, so one slurm.conf serves both. Its packages need EPEL 8 for libjwt (the
  spec's `Requires: libjwt >= 1.10.0` under `%if 0%{?rhel}`), which is why OpenHPC's own release package
  requires epel-release. The install step writes the two repositories itself rather than install
  `ohpc-release`, whose `Requires: redhat-release >= 8.1` TencentOS may not provide (v2.8.GA
  components/admin/ohpc-release/SPECS/release.spec), takes only libjwt from EPEL (SchedMD advises keeping
  EPEL's Slurm out: slurm.schedmd.com/upgrades.html), and trusts each repository's signing key only after
  checking its fingerprint against the one pinned here.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from components.cloudinit import Step, bash_script

SLURM_RELEASE = "23.11.4"
"""The Slurm release every node runs: Ubuntu 24.04's slurm-wlm (packages.ubuntu.com/noble/slurmd: 23.11.4) and
OpenHPC 2.8's slurm-ohpc (v2.8.GA slurm.spec: Version 23.11.4)."""


KEYS = Path(__file__).parent / "keys"
"""Public signing keys shipped with the program, each a verbatim copy of its primary source."""


@dataclass(frozen=True)
class RepoKey:
    """A package repository's signing key: the shipped copy (`shipped`, a file in KEYS) or the first of `urls` that
    answers, trusted only if it holds exactly one key and that key's fingerprint is this one."""

    urls: tuple[str, ...]
    fingerprint: str
    path: str
    shipped: str = ""

    def text(self) -> str:
        return (KEYS / self.shipped).read_text() if self.shipped else ""


@dataclass(frozen=True)
class SlurmOS:
    name: str
    description: str
    packages: Mapping[str, Optional[str]]
    """The boot's package needs (Ubuntu's names, which the generic code uses) → this system's package, or None
    where the base system already has it."""
    cgroup_plugin: str
    """cgroup.conf CgroupPlugin."""
    repositories: str = ""
    """A yum .repo file the install step writes (empty: the image's own repositories suffice)."""
    keys: tuple[RepoKey, ...] = ()
    after_install: str = ""
    """Bash lines the install step runs once the packages are in."""
    unconfirmed: tuple[str, ...] = field(default=())
    """What no source confirms for this system; said in the plan notes."""

    def names(self, needs: tuple[str, ...]) -> tuple[str, ...]:
        missing = [n for n in needs if n not in self.packages]
        if missing:
            raise ValueError(f"{self.name} has no package for {', '.join(missing)}")
        return tuple(p for p in (self.packages[n] for n in needs) if p)

    def install_step(self, needs: tuple[str, ...]) -> Optional[Step]:
        """None where cloud-init's package module installs `needs`; else the boot step that adds the
        repositories, checks their keys and installs them."""
        if not self.repositories:
            return None
        keys = ""
        for k in self.keys:
            sources = list(k.urls)
            if k.shipped:  # the shipped copy first: no network needed for it
                keys += f"cat > \"$work/{k.shipped}\" <<'KEY'\n{k.text()}KEY\n"
                sources.insert(0, f"file://$work/{k.shipped}")
            keys += f"trust_key {k.fingerprint} {shlex.quote(k.path)} {' '.join(sources)}\n"
        return Step("gpu-cluster-slurm-packages", bash_script(
            "gpu-cluster-slurm-packages", f"Install Slurm {SLURM_RELEASE} and its companions ({self.description})",
            _INSTALL_SH.replace("{keys}", keys).replace("{repo}", self.repositories)
            .replace("{packages}", " ".join(shlex.quote(p) for p in self.names(needs)))
            .replace("{after}", self.after_install)))


_INSTALL_SH = r"""
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trust_key() {  # fingerprint path source...: kept only when it holds exactly one key, the pinned one
  local want=$1 path=$2 got keys url
  shift 2
  for url in "$@"; do
    curl -fsSL --retry 3 -o "$work/key" "$url" || continue
    keys=$(gpg --with-colons --show-keys "$work/key" 2> /dev/null | awk -F: '$1 == "pub"' | wc -l)
    got=$(gpg --with-colons --show-keys "$work/key" 2> /dev/null | awk -F: '$1 == "fpr" { print $10; exit }')
    if [ "$keys" = 1 ] && [ "$got" = "$want" ]; then
      install -D -m 0644 "$work/key" "$path"
      rpm --import "$path" || fail "rpm does not accept the key $path"
      return 0
    fi
    echo "$NAME: $url holds $keys key(s), the first ${got:-none}, not the pinned $want alone" >&2
  done
  fail "no copy of the signing key $want could be had from $*"
}
{keys}cat > /etc/yum.repos.d/gpu-cluster-slurm.repo <<'REPO'
{repo}REPO
dnf install -y --setopt=install_weak_deps=False {packages} || fail "dnf could not install the Slurm packages"
{after}"""

UBUNTU_2404 = SlurmOS(
    name="ubuntu-24.04",
    description="Ubuntu 24.04",
    packages={n: n for n in ("slurmctld", "slurmd", "slurm-client", "munge", "fio", "iptables", "python3-venv",
                             "tzdata-legacy")},
    # cgroup v2, the unified hierarchy Ubuntu 24.04 boots with (Ubuntu 21.10 and later: Ubuntu release notes).
    cgroup_plugin="cgroup/v2",
)

OPENHPC_KEY = RepoKey(
    # Shipped: keys/RPM-GPG-KEY-OpenHPC-2 is openhpc/ohpc v2.8.GA components/admin/ohpc-release/SOURCES/
    # RPM-GPG-KEY-OpenHPC-2, the key ohpc-release installs for OpenHPC 2.x (GitHub is often out of reach from
    # mainland China); the project's copy online only if the shipped one were unusable.
    urls=("https://raw.githubusercontent.com/openhpc/ohpc/v2.8.GA/components/admin/ohpc-release/SOURCES/"
          "RPM-GPG-KEY-OpenHPC-2",),
    # gpg --show-keys of that file: rsa2048 2019-12-16, the key OpenHPC 2.x packages are signed with.
    fingerprint="5392744D3C543ED5784765E68A306019DA565C6C",
    path="/etc/pki/rpm-gpg/RPM-GPG-KEY-OpenHPC-2",
    shipped="RPM-GPG-KEY-OpenHPC-2")
EPEL8_KEY = RepoKey(
    urls=("https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-8",),
    # "Fedora EPEL (8) <epel@fedoraproject.org>", key id 21EA45AB2F86D6A1 (fedoraproject.org/security).
    fingerprint="94E279EB8D8F25B21810ADF121EA45AB2F86D6A1",
    path="/etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-8")

# OpenHPC 2.x's repository definition (v2.8.GA release.spec: baseurl <repo>/OpenHPC/2/EL_8 and
# <repo>/OpenHPC/2/updates/EL_8, repo http://repos.openhpc.community); EPEL 8's metalink as Fedora's epel-release
# writes it. The packages are pinned to the release, so a node booted after OpenHPC moves on still installs the
# head node's Slurm.
_EL8_REPOS = f"""[gpu-cluster-openhpc]
name=OpenHPC 2 (gpu-cluster)
baseurl=http://repos.openhpc.community/OpenHPC/2/EL_8
gpgcheck=1
gpgkey=file://{OPENHPC_KEY.path}

[gpu-cluster-openhpc-updates]
name=OpenHPC 2 updates (gpu-cluster)
baseurl=http://repos.openhpc.community/OpenHPC/2/updates/EL_8
gpgcheck=1
gpgkey=file://{OPENHPC_KEY.path}

[gpu-cluster-epel]
name=EPEL 8, libjwt only (gpu-cluster)
metalink=https://mirrors.fedoraproject.org/metalink?repo=epel-8&arch=$basearch
gpgcheck=1
gpgkey=file://{EPEL8_KEY.path}
includepkgs=libjwt*
"""

EL8_OPENHPC = SlurmOS(
    name="el8-openhpc",
    description="TencentOS Server 3.1 with OpenHPC 2",
    packages={
        # OpenHPC 2.8 package names (v2.8.GA docs/recipes/install/rocky8/x86_64/warewulf/slurm/manifest/pkg-ohpc.all):
        # slurm-ohpc holds the client commands; the daemons come in their own packages.
        "slurmctld": f"slurm-slurmctld-ohpc-{SLURM_RELEASE}",
        "slurmd": f"slurm-slurmd-ohpc-{SLURM_RELEASE}",
        "slurm-client": f"slurm-ohpc-{SLURM_RELEASE}",
        # munge from the distribution, as OpenHPC's spec requires it (`Requires: munge`); fio and iptables too.
        "munge": "munge", "fio": "fio", "iptables": "iptables",
        # The scripts' python3 needs zoneinfo (3.9: slurm-window) and venv (tccli): EL 8's default python3 is 3.6,
        # so the install step puts AppStream's python39 first on the scripts' PATH as `python3` (after_install),
        # leaving /usr/bin/python3, which the system's tools name, as it is.
        "python3-venv": "python39",
        # EL 8's tzdata keeps the old alias zone names (no tzdata-legacy split, unlike Ubuntu 24.04).
        "tzdata-legacy": None,
    },
    # EL 8 boots with cgroup v1 (RHEL 8 documentation, "Understanding control groups"); whether TencentOS 3.1
    # does is not published, and `autodetect` (the default: cgroup.conf(5), Slurm 23.11) uses whichever it mounts.
    cgroup_plugin="autodetect",
    repositories=_EL8_REPOS,
    keys=(OPENHPC_KEY, EPEL8_KEY),
    after_install=(
        # the scripts' `python3` (PATH: /usr/local/bin first); /usr/bin/python3 and the system's tools stay as they are
        'ln -sf /usr/bin/python3.9 /usr/local/bin/python3\n'
        'PATH=/usr/local/bin:$PATH python3 -c "import venv, zoneinfo" || fail "python3.9 does not run: the scripts need it"\n'
        # slurm.conf's SlurmctldLogFile / SlurmdLogFile live there, and OpenHPC's packages make no such directory
        # (v2.8.GA slurm.spec %post makes /var/spool/slurmctld and /var/log/slurm_jobcomp.log only)
        'install -d -o slurm -g slurm -m 0755 /var/log/slurm\n'),
    unconfirmed=(
        f"OpenHPC's EL 8 updates repository still serves Slurm {SLURM_RELEASE} (its 2.8 release; 2.9 moved to "
        f"23.11.10 and 2.10 to 25.05.8)",
        "TencentOS Server 3.1's repositories carry munge, fio and python39 (RHEL 8 AppStream packages)",
        "the cgroup hierarchy TencentOS Server 3.1 mounts (Slurm's cgroup plugin is set to autodetect)",
    ),
)

SLURM_OSES: dict[str, SlurmOS] = {o.name: o for o in (UBUNTU_2404, EL8_OPENHPC)}


def slurm_os(name: str) -> SlurmOS:
    try:
        return SLURM_OSES[name]
    except KeyError:
        raise ValueError(f"no Slurm install for operating system {name!r}; expected one of {sorted(SLURM_OSES)}") \
            from None
