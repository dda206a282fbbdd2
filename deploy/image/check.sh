#!/usr/bin/env bash
# Builds a container image around the `flotilla` binary this workspace just built and runs it, with
# Debian's buildah (vfs storage, chroot isolation: no daemon, no registry, no privileges beyond root in
# this machine). deploy/Dockerfile builds from source on `rust` and `debian` base images, which a
# registry-less machine cannot pull; this image is FROM scratch: the binary, the shared libraries `ldd`
# names for it, and the same non-root user and entrypoint as deploy/Dockerfile. Then, inside it:
#   - `flotilla --version` prints the workspace's version;
#   - `flotilla rbac` runs (the binary's own code, beyond argument parsing, works in the image).
# Usage: deploy/image/check.sh [path/to/flotilla]   (default target/debug/flotilla)
# Storage lives under target/buildah and is removed afterwards, so nothing is left in /var/lib/containers.
set -euo pipefail
cd "$(dirname "$0")/../.."

binary="${1:-target/debug/flotilla}"
image="localhost/flotilla:check"
store="$PWD/target/buildah"

fail() {
  echo "deploy/image/check.sh: $*" >&2
  exit 1
}

[ -x "$binary" ] || fail "$binary is not built (cargo build --bin flotilla)"
command -v buildah >/dev/null 2>&1 || fail "buildah is missing (deploy/dev/prerequisites.sh installs it)"
bah() {
  buildah --storage-driver vfs --root "$store/storage" --runroot "$store/run" "$@"
}
export BUILDAH_ISOLATION=chroot

containers=()
cleanup() {
  for c in "${containers[@]}"; do bah rm "$c" >/dev/null 2>&1 || true; done
  bah rmi -f "$image" >/dev/null 2>&1 || true
  rm -rf "$store"
}
trap cleanup EXIT
rm -rf "$store"

# The image: binary and loader/libraries at their host paths, nothing else.
build="$(bah from scratch)"
containers+=("$build")
root="$(bah mount "$build")"
install -D -m 0755 "$binary" "$root/usr/local/bin/flotilla"
while IFS= read -r lib; do
  install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done < <(ldd "$binary" | grep -o '/[^ ]*')
bah umount "$build" >/dev/null
bah config --user 65532:65532 --entrypoint '["/usr/local/bin/flotilla"]' --cmd '--help' \
  --port 7450 --port 7451 --port 10258 "$build"
bah commit --quiet "$build" "$image" >/dev/null || fail "buildah commit failed"

# Run it from the committed image, as the image's user.
run="$(bah from "$image")"
containers+=("$run")
expected="$("$binary" --version)"
got="$(bah run "$run" -- /usr/local/bin/flotilla --version)" || fail "flotilla --version failed in the image"
[ "$got" = "$expected" ] || fail "the image's flotilla --version printed '$got', want '$expected'"
user="$(bah run "$run" -- /usr/local/bin/flotilla rbac --role worker --controllers deployment -o json)" \
  || fail "flotilla rbac failed in the image"
grep -q '"replicasets"' <<<"$user" || fail "flotilla rbac in the image printed no replicasets rule: $user"
[ "$(bah inspect --format '{{.OCIv1.Config.User}}' "$image")" = "65532:65532" ] \
  || fail "the image does not run as the non-root user 65532"
echo "image ok: $got runs in $image as 65532:65532" >&2
