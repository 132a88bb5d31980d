#!/usr/bin/env bash
# What the Kubernetes tests' real node needs on this host (docs/kubernetes.md, "The test cluster"):
#
#   1. containerd and the CNI plugins from the distribution's packages, when missing (the tests
#      run their own containerd with its own root, state and socket; the packaged service is not
#      started: this kind of machine has no systemd);
#   2. the kernel settings a kubelet wants. A kubelet changes them itself unless it runs with
#      protectKernelDefaults, in which case it refuses to start until they are set; the tests run
#      it with protectKernelDefaults, so they are set here, once, and said.
#
# Idempotent. Without root or apt-get it says what is missing and exits 0: the real-node tests
# then skip with the reason (the kwok tests need neither).
set -euo pipefail

say() { echo "k8s-node-setup: $*"; }
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

missing=()
command -v containerd >/dev/null || missing+=(containerd)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
command -v crun >/dev/null || missing+=(crun)
if [ ${#missing[@]} -gt 0 ]; then
    if command -v apt-get >/dev/null && { [ -z "$SUDO" ] || sudo -n true 2>/dev/null; }; then
        say "installing ${missing[*]}"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >/dev/null
    else
        say "missing ${missing[*]} (no apt-get or no root): the real-node tests will be skipped"
        exit 0
    fi
fi

# The values a kubelet with protectKernelDefaults checks (pkg/kubelet/cm/container_manager_linux.go).
declare -A wanted=(
    [vm.overcommit_memory]=1
    [vm.panic_on_oom]=0
    [kernel.panic]=10
    [kernel.panic_on_oops]=1
    [kernel.keys.root_maxkeys]=1000000
    [kernel.keys.root_maxbytes]=25000000
)
for key in "${!wanted[@]}"; do
    file=/proc/sys/${key//.//}
    [ -e "$file" ] || continue
    have=$(cat "$file")
    if [ "$have" != "${wanted[$key]}" ]; then
        if [ -w "$file" ]; then
            echo "${wanted[$key]}" >"$file"
            say "set $key=${wanted[$key]} (was $have) for the kubelet"
        else
            say "$key is $have, a kubelet wants ${wanted[$key]}: the real-node tests will be skipped"
        fi
    fi
done
