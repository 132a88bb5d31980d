#!/usr/bin/env bash
# The container runtime shoal's `container` jobs use, set up the way docs/containers.md describes:
#
#   1. podman, crun and runc (and debootstrap and busybox-static, to build the test images), from
#      the distribution's packages, when they are missing;
#   2. the two per-boot fixes this kind of machine needs (cgroup v1 with a cgroup2 mount beside it):
#      mount the hugetlb controller (else crun refuses "cgroups in hybrid mode"), and a
#      containers.conf drop-in with ulimits the container may set and a default subnet in
#      198.18.0.0/15 (never podman's default 10.88.0.0/16);
#   3. the test images, built offline once and cached under .cache/images: a 2 MB busybox image
#      and a Debian minbase image with python3 and numpy (debootstrap from the configured mirror).
#
# Idempotent: a second run checks and does nothing. Without root or apt-get it says what is missing
# and exits 0: the process runtime keeps working and the container tests are skipped with the
# reason. Usage: scripts/containers-setup.sh [--no-images]
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=.cache/images
BUSYBOX_IMAGE=localhost/shoal-test/busybox:local
PYTHON_IMAGE=localhost/shoal-test/python:bookworm
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

say() { echo "containers-setup: $*"; }

install_packages() {
    local missing=()
    command -v podman >/dev/null || missing+=(podman)
    command -v crun >/dev/null || missing+=(crun)
    command -v runc >/dev/null || missing+=(runc)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    [ -x /bin/busybox ] || missing+=(busybox-static)
    command -v newuidmap >/dev/null || missing+=(uidmap)
    [ ${#missing[@]} = 0 ] && return 0
    if ! command -v apt-get >/dev/null; then
        say "missing ${missing[*]} and there is no apt-get: container jobs will not run here" \
            "(install podman and crun yourself; the process runtime works without them)"
        return 1
    fi
    say "installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        podman crun runc bubblewrap debootstrap busybox-static uidmap >/dev/null
}

per_boot_fixes() {
    # Fix 1: on a hybrid host (v1 controllers plus cgroup2 at /sys/fs/cgroup/unified) hugetlb is
    # the only controller left on cgroup2, and crun gives up; mounting it as v1 takes it back.
    if [ -d /sys/fs/cgroup/memory ] && [ ! -f /sys/fs/cgroup/cgroup.controllers ] \
        && grep -qw hugetlb /proc/cgroups && ! mountpoint -q /sys/fs/cgroup/hugetlb; then
        say "mounting the hugetlb cgroup controller (v1)"
        $SUDO mkdir -p /sys/fs/cgroup/hugetlb
        $SUDO mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb
    fi
    # Fix 2: a drop-in, so an administrator's own containers.conf is left as it is.
    local dropin=/etc/containers/containers.conf.d/50-shoal.conf
    local wanted
    wanted=$(cat <<'EOF'
# Written by shoal's scripts/containers-setup.sh (docs/containers.md).
[containers]
# The hard nofile limit here is 20000 and there is no CAP_SYS_RESOURCE: podman's defaults fail.
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[network]
# Never podman's default 10.88.0.0/16.
default_subnet = "198.18.88.0/24"
EOF
)
    if [ "$(cat "$dropin" 2>/dev/null)" != "$wanted" ]; then
        say "writing $dropin"
        $SUDO mkdir -p "$(dirname "$dropin")"
        echo "$wanted" | $SUDO tee "$dropin" >/dev/null
    fi
    # Debian's podman ships its CNI "podman" network already written with 10.88.0.0/16, which
    # default_subnet does not change: move it too.
    local conflist=/etc/cni/net.d/87-podman-bridge.conflist
    if grep -q '10\.88\.' "$conflist" 2>/dev/null; then
        say "moving podman's CNI network in $conflist to 198.18.88.0/24"
        $SUDO sed -i -e 's#10\.88\.0\.0/16#198.18.88.0/24#' -e 's#10\.88\.0\.1#198.18.88.1#' "$conflist"
    fi
    # A bridge podman made before the move keeps its 10.88 address and refuses the new one.
    if ip -4 addr show dev cni-podman0 2>/dev/null | grep -q 'inet 10\.88\.'; then
        say "removing the old cni-podman0 bridge (10.88.0.0/16)"
        $SUDO ip link delete cni-podman0
    fi
}

image_exists() { podman image exists "$1" 2>/dev/null; }

build_busybox() {
    image_exists "$BUSYBOX_IMAGE" && return 0
    local tar=$CACHE/busybox.tar
    if [ ! -s "$tar" ]; then
        local root
        root=$(mktemp -d)
        mkdir -p "$root/bin" "$root/tmp" "$root/dev/shm"
        cp /bin/busybox "$root/bin/"
        for tool in sh cat echo sleep true false env ls; do ln -s busybox "$root/bin/$tool"; done
        tar -C "$root" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
        rm -rf "$root"
    fi
    say "importing $BUSYBOX_IMAGE"
    podman import --quiet "$tar" "$BUSYBOX_IMAGE" >/dev/null
}

debian_mirror() {
    local mirror
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    echo "${mirror:-http://deb.debian.org/debian}"
}

build_python() {
    image_exists "$PYTHON_IMAGE" && return 0
    local tar=$CACHE/python-bookworm-2.tar
    if [ ! -s "$tar" ]; then
        local root
        root=$(mktemp -d)
        say "building the python image with debootstrap (about 30 s, once)"
        $SUDO debootstrap --variant=minbase --include=python3,python3-numpy,python-is-python3 bookworm "$root" \
            "$(debian_mirror)" >/dev/null
        $SUDO rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
        $SUDO tar -C "$root" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
        $SUDO rm -rf "$root"
    fi
    say "importing $PYTHON_IMAGE"
    podman import --quiet --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' "$tar" \
        "$PYTHON_IMAGE" >/dev/null
}

install_packages || exit 0
per_boot_fixes
if [ "${1:-}" != "--no-images" ]; then
    mkdir -p "$CACHE"
    # podman leaves an empty `oom` file in its working directory: keep it in the cache.
    cd "$CACHE" && CACHE=. && build_busybox && build_python
fi
