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
from typing import Mapping, Optional

from components.cloudinit import Step, bash_script

SLURM_RELEASE = "23.11.4"
"""The Slurm release every node runs: Ubuntu 24.04's slurm-wlm (packages.ubuntu.com/noble/slurmd: 23.11.4) and
OpenHPC 2.8's slurm-ohpc (v2.8.GA slurm.spec: Version 23.11.4)."""


@dataclass(frozen=True)
class RepoKey:
    """A package repository's signing key: fetched at boot from the first of `urls` that answers, trusted only if its
    fingerprint is this one (so any copy of the key will do)."""

    urls: tuple[str, ...]
    fingerprint: str
    path: str


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
        keys = "".join(f"trust_key {k.fingerprint} {shlex.quote(k.path)} {' '.join(map(shlex.quote, k.urls))}\n"
                       for k in self.keys)
        return Step("gpu-cluster-slurm-packages", bash_script(
            "gpu-cluster-slurm-packages", f"Install Slurm {SLURM_RELEASE} and its companions ({self.description})",
            _INSTALL_SH.replace("{keys}", keys).replace("{repo}", self.repositories)
            .replace("{packages}", " ".join(shlex.quote(p) for p in self.names(needs)))
            .replace("{after}", self.after_install)))


_INSTALL_SH = r"""
trust_key() {  # fingerprint path url...: kept only when the key's primary fingerprint is the pinned one
  local want=$1 path=$2 tmp got url
  shift 2
  tmp=$(mktemp)
  for url in "$@"; do
    curl -fsSL --retry 3 -o "$tmp" "$url" || continue
    got=$(gpg --with-colons --show-keys "$tmp" 2> /dev/null | awk -F: '$1 == "fpr" { print $10; exit }')
    if [ "$got" = "$want" ]; then
      install -D -m 0644 "$tmp" "$path"
      rm -f "$tmp"
      rpm --import "$path" || fail "rpm does not accept the key $path"
      return 0
    fi
    echo "$NAME: the key at $url has fingerprint ${got:-none}, not the pinned $want" >&2
  done
  rm -f "$tmp"
  fail "no copy of the signing key $want could be fetched from $*"
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
    # The project's own copy at its 2.8 tag; then the repository's, where Open Build Service publishes a
    # repository's key (repodata/repomd.xml.key; whether OpenHPC's mirror keeps it is not confirmed).
    urls=("https://raw.githubusercontent.com/openhpc/ohpc/v2.8.GA/components/admin/ohpc-release/SOURCES/"
          "RPM-GPG-KEY-OpenHPC-2",
          "http://repos.openhpc.community/OpenHPC/2/EL_8/repodata/repomd.xml.key"),
    # gpg --show-keys of that file: rsa2048 2019-12-16, the key OpenHPC 2.x packages are signed with.
    fingerprint="5392744D3C543ED5784765E68A306019DA565C6C",
    path="/etc/pki/rpm-gpg/RPM-GPG-KEY-OpenHPC-2")
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
        # so the install step makes AppStream's python39 the system's `python3` (RHEL 8 documentation,
        # "Installing and using Python": `alternatives --set python3 /usr/bin/python3.9`; the system's own tools
        # use platform-python, which this leaves alone).
        "python3-venv": "python39",
        # EL 8's tzdata keeps the old alias zone names (no tzdata-legacy split, unlike Ubuntu 24.04).
        "tzdata-legacy": None,
    },
    # EL 8 boots with cgroup v1 (RHEL 8 documentation, "Understanding control groups"); whether TencentOS 3.1
    # does is not published, and `autodetect` (the default: cgroup.conf(5), Slurm 23.11) uses whichever it mounts.
    cgroup_plugin="autodetect",
    repositories=_EL8_REPOS,
    keys=(OPENHPC_KEY, EPEL8_KEY),
    after_install=('if [ -x /usr/bin/python3.9 ]; then alternatives --set python3 /usr/bin/python3.9; fi\n'
                   'python3 -c "import venv, zoneinfo" || fail "python3 is $(python3 -V 2>&1), the scripts need 3.9"\n'),
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
