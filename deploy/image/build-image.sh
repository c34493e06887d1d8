#!/usr/bin/env bash
# Builds the Power container image from Debian packages and our own build only (no base image
# from a registry): debootstrap makes a minimal Debian bookworm root filesystem with the
# shared libraries the `power` binary links (found with ldd and dpkg -S), the binary goes to
# /usr/local/bin, a non-root user `power` (uid 10001) owns the store volume /var/lib/power,
# and `podman import` turns the tree into an image. docs/DEPLOY.md.
#
# usage: deploy/image/build-image.sh [--binary PATH] [--tag NAME] [--workdir DIR] [--test MODEL]
#   --binary   the power binary (default: build/src/cli/power)
#   --tag      image name (default: localhost/power:latest)
#   --workdir  where the root filesystem is made (default: a temporary directory, removed)
#   --test     after the build, serve MODEL (a GGUF file) from the image and check /health and
#              one completion: with `podman run` where podman can run containers, else in the
#              same root filesystem with chroot (said so), so the image's contents are checked
#              either way.
# Needs root (debootstrap, chroot), debootstrap and podman (scripts/setup.sh installs them). The Debian mirror is $POWER_DEBIAN_MIRROR, else the
# first one apt uses here, else deb.debian.org.
set -euo pipefail
cd "$(dirname "$0")/../.."

binary=build/src/cli/power
tag=localhost/power:latest
workdir=""
test_model=""
while (($#)); do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --workdir) workdir="$2"; shift 2 ;;
    --test) test_model="$2"; shift 2 ;;
    *) echo "build-image: unknown argument $1" >&2; exit 2 ;;
  esac
done
say() { echo "build-image: $*" >&2; }
[[ -x "$binary" ]] || { say "no binary at $binary (build first)"; exit 1; }
[[ $(id -u) -eq 0 ]] || { say "needs root (debootstrap, chroot)"; exit 1; }
for t in debootstrap podman; do
  command -v "$t" >/dev/null || { say "$t not found (apt-get install $t)"; exit 1; }
done

mirror="${POWER_DEBIAN_MIRROR:-}"
if [[ -z "$mirror" ]]; then
  mirror=$(grep -hoE '^URIs: *[^ ]+' /etc/apt/sources.list.d/*.sources 2>/dev/null |
    awk '{print $2}' | grep -v security | head -1 || true)
fi
if [[ -z "$mirror" ]]; then
  mirror=$(grep -hoE '^deb +[^ ]+' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -1 || true)
fi
mirror="${mirror:-http://deb.debian.org/debian}"

cleanup=""
if [[ -z "$workdir" ]]; then
  workdir=$(mktemp -d)
  cleanup="$workdir"
fi
trap '[[ -n "$cleanup" ]] && rm -rf "$cleanup"' EXIT
mkdir -p "$workdir"
rootfs="$workdir/rootfs"

# The Debian packages that hold the binary's shared libraries.
mapfile -t libs < <(ldd "$binary" | awk '/=> \// {print $3}')
mapfile -t packages < <(for l in "${libs[@]}"; do
  dpkg -S "$(readlink -f "$l")" 2>/dev/null || dpkg -S "$l" 2>/dev/null || true
done | cut -d: -f1 | sort -u)
((${#packages[@]})) || { say "could not map the binary's libraries to packages"; exit 1; }
include=$(IFS=,; echo "ca-certificates,${packages[*]}")
say "debootstrap bookworm from $mirror with: $include"
start=$(date +%s)
debootstrap --variant=minbase --include="$include" bookworm "$rootfs" "$mirror" >"$workdir/debootstrap.log" 2>&1 ||
  { tail -20 "$workdir/debootstrap.log" >&2; say "debootstrap failed"; exit 1; }
say "root filesystem in $(($(date +%s) - start)) s"

install -m 0755 "$binary" "$rootfs/usr/local/bin/power"
strip --strip-debug "$rootfs/usr/local/bin/power"  # symbols stay, debug info goes
chroot "$rootfs" groupadd --gid 10001 power
chroot "$rootfs" useradd --uid 10001 --gid 10001 --home-dir /var/lib/power --no-create-home \
  --shell /usr/sbin/nologin power
install -d -o 10001 -g 10001 -m 0750 "$rootfs/var/lib/power"
# Nothing of apt's caches or logs in the image.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*

# The binary resolves all its libraries inside the tree.
if chroot "$rootfs" /usr/bin/ldd /usr/local/bin/power | grep -q "not found"; then
  chroot "$rootfs" /usr/bin/ldd /usr/local/bin/power >&2
  say "libraries missing in the root filesystem"
  exit 1
fi

tar --numeric-owner -C "$rootfs" -c . | podman import \
  --change 'USER 10001:10001' \
  --change 'ENV POWER_HOME=/var/lib/power' \
  --change 'VOLUME /var/lib/power' \
  --change 'EXPOSE 8080' \
  --change 'WORKDIR /var/lib/power' \
  --change 'ENTRYPOINT ["/usr/local/bin/power"]' \
  --change 'CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]' \
  - "$tag" >/dev/null
size=$(podman image inspect "$tag" --format '{{.Size}}')
say "image $tag: $((size / 1048576)) MiB, $(podman image inspect "$tag" --format '{{.Config.User}}') user"

[[ -n "$test_model" ]] || exit 0

# The test: serve the model from the image and ask it for a completion.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
model_dir=$(cd "$(dirname "$test_model")" && pwd)
model_name=$(basename "$test_model")
if podman run --rm --network host "$tag" --version >/dev/null 2>"$workdir/probe.err"; then
  mode="podman run"
  podman run -d --name power-image-test --network host -v power-image-test-store:/var/lib/power \
    -v "$model_dir:/models:ro" "$tag" serve --host 127.0.0.1 --port "$port" \
    -m "/models/$model_name" --threads 1 >/dev/null
  stop_server() { podman rm -f power-image-test >/dev/null 2>&1 || true; podman volume rm -f power-image-test-store >/dev/null 2>&1 || true; }
else
  mode="chroot"
  say "podman cannot run containers here ($(tail -1 "$workdir/probe.err")): testing the root filesystem under chroot"
  mkdir -p "$rootfs/models" "$rootfs/proc" "$rootfs/dev"
  cp "$test_model" "$rootfs/models/"
  # /proc (meminfo for the memory budget) and /dev (urandom); best effort.
  mounted=()
  if mount -t proc proc "$rootfs/proc"; then mounted+=("$rootfs/proc"); else say "no /proc in the chroot"; fi
  if mount --bind /dev "$rootfs/dev"; then mounted+=("$rootfs/dev"); else say "no /dev in the chroot"; fi
  chroot --userspec=10001:10001 "$rootfs" env POWER_HOME=/var/lib/power /usr/local/bin/power serve \
    --host 127.0.0.1 --port "$port" -m "/models/$model_name" --threads 1 >"$workdir/serve.log" 2>&1 &
  pid=$!
  stop_server() {
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    for m in "${mounted[@]}"; do umount "$m" || true; done
  }
fi
say "testing the image with $mode"
ok=0
for _ in $(seq 1 100); do
  if curl -sf "http://127.0.0.1:$port/health/ready" >/dev/null; then ok=1; break; fi
  sleep 0.2
done
answer=""
if ((ok)); then
  answer=$(curl -sf "http://127.0.0.1:$port/v1/completions" -H 'content-type: application/json' \
    -d "{\"model\":\"${model_name%.gguf}\",\"prompt\":\"Once upon a time\",\"max_tokens\":8}" || true)
fi
stop_server
if [[ "$answer" != *'"completion_tokens":8'* ]]; then
  [[ -f "$workdir/serve.log" ]] && tail -20 "$workdir/serve.log" >&2
  say "FAILED: the image did not serve a completion (ready=$ok, answer: $answer)"
  exit 1
fi
say "ok: /health/ready 200 and an 8-token completion from the image ($mode)"
