#!/usr/bin/env bash
# Builds the container image localhost/nodesleuth:VERSION (VERSION = __version__ in
# src/nodesleuth/__init__.py) from Debian packages and the package's own wheel only: no base image is
# pulled from a container registry.
#
#   1. root file system: mmdebstrap makes Debian trixie (variant essential + deploy/image/packages.txt,
#      no Recommends, no docs/man/locales, apt lists removed) as a tarball, cached under
#      /var/cache/nodesleuth-image/ keyed by the package list and the recipe below, and imported with
#      `podman import` as localhost/nodesleuth-base:KEY (the layer every version shares);
#   2. the wheel: `pip wheel --no-deps` of a copy of this checkout (the checkout is left untouched);
#   3. the image: a buildah working container from the base, the wheel installed with Debian's
#      python3-installer under /usr/local (so /usr/local/bin/nodesleuth, the path the NPD plugin
#      config runs), entrypoint nodesleuth, committed as localhost/nodesleuth:VERSION.
#
# A rebuild that only changes the wheel reuses the base image (seconds); with only the tarball cached
# it imports it again; a changed package list makes the tarball anew (minutes; needs the Debian mirror).
#
# Usage (as root, from any directory): bash deploy/image/build.sh [--refresh] [--if-missing]
#                                      [--save FILE.tar] [--print-image]
#   --refresh      make the root file system anew even when cached (picks up Debian security updates)
#   --if-missing   do nothing when localhost/nodesleuth:VERSION exists and was built from this
#                  checkout's sources (label io.nodesleuth.source) and the same root file system
#   --save FILE    also write the image as a docker-archive (`docker load -i FILE` on another host)
#   --print-image  print the image name and exit
# Environment: NODESLEUTH_IMAGE_CACHE (default /var/cache/nodesleuth-image), PYTHON (default python3,
# the interpreter whose pip builds the wheel), DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
die() { echo "build.sh: $*" >&2; exit 1; }

refresh=0 if_missing=0 save="" print_image=0
while [ $# -gt 0 ]; do
    case "$1" in
        --refresh) refresh=1 ;;
        --if-missing) if_missing=1 ;;
        --save) [ $# -ge 2 ] || die "--save needs a file"; save="$2"; shift ;;
        --print-image) print_image=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

# the one place the version is defined
version="$(sed -n "s/^__version__[[:space:]]*=[[:space:]]*['\"]\([^'\"]*\)['\"].*/\1/p" "$repo/src/nodesleuth/__init__.py")"
[ -n "$version" ] || die "no __version__ in $repo/src/nodesleuth/__init__.py"
image="localhost/nodesleuth:$version"
if [ "$print_image" = 1 ]; then echo "$image"; exit 0; fi
[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap and podman import/buildah mount need it)"

start=$(date +%s.%N)
export DEBIAN_FRONTEND=noninteractive
need=()
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v podman >/dev/null || need+=(podman)
command -v buildah >/dev/null || need+=(buildah)
[ -x /usr/sbin/runc ] || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
    echo "build.sh: installing ${need[*]} (Debian packages)" >&2
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# ---- 1. the Debian root file system (cached) ----
suite=trixie
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
packages="$(sed 's/#.*//' "$here/packages.txt" | tr -s ' \t' '\n\n' | awk NF | sort -u | paste -sd, -)"
[ -n "$packages" ] || die "no packages in $here/packages.txt"
# Everything that decides the tarball's content is in mmopts and the package list, and both are in the key.
mmopts=(
    --mode=root --format=tar --variant=essential
    --aptopt='Apt::Install-Recommends "false"'
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-include=/usr/share/locale/locale.alias'
    --dpkgopt='path-exclude=/usr/share/lintian/*'
    --dpkgopt='path-exclude=/usr/share/bash-completion/*'
    --dpkgopt='path-exclude=/usr/share/zsh/*'
    --dpkgopt='path-exclude=/usr/share/fish/*'
    # perl's modules (perl-modules-5.40, libperl5.40's XS modules: ~45 MB): linux-perf depends on perl and
    # links libperl.so (kept), but perl is only loaded for `perf script -s FILE.pl`, which nodesleuth never
    # runs (it runs perf record, perf script without -s, perf trace); perl-base (essential, in
    # /usr/lib/*/perl-base) stays for maintainer scripts. perf's own perl and python scripts go with them.
    --dpkgopt='path-exclude=/usr/share/perl/*'
    --dpkgopt='path-exclude=/usr/lib/*/perl/*'
    --dpkgopt='path-exclude=/usr/libexec/perf-core/scripts/*'
    --dpkgopt='path-exclude=/usr/libexec/perf-core/tests/*'
    # linux-perf's Python binding (`import perf`, 9 MB): nodesleuth runs the perf binary and never imports it
    --dpkgopt='path-exclude=/usr/lib/python3/dist-packages/perf.cpython-*'
    # numpy's own test suite (tens of MB, never imported at run time) is removed after installation:
    # excluding it from dpkg makes its postinst (py3compile) fail
    --customize-hook='find "$1"/usr/lib/python3/dist-packages/numpy -depth -type d -name tests -exec rm -rf {} +'
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old "$1"/var/log/*; : > "$1"/etc/machine-id'
)
key="$(printf '%s\n' "$suite" "$mirror" "$security" "${mmopts[@]}" "$packages" | sha256sum | cut -c1-16)"
cache="${NODESLEUTH_IMAGE_CACHE:-/var/cache/nodesleuth-image}"
tarball="$cache/rootfs-$suite-$key.tar"
base="localhost/nodesleuth-base:$key"
mkdir -p "$cache"

# what the wheel is made of, and its digest with this script's: the image carries it, so --if-missing
# rebuilds a stale image
wheel_src=(pyproject.toml README.md src)
for f in setup.py setup.cfg MANIFEST.in LICENSE LICENSE.txt NOTICE; do [ -e "$repo/$f" ] && wheel_src+=("$f"); done
src_digest="$(cd "$repo" && { find "${wheel_src[@]}" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' \
    ! -path '*.egg-info/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; sha256sum "$here/build.sh"; } \
    | sha256sum | cut -c1-16)"
if [ "$if_missing" = 1 ] && [ "$refresh" = 0 ] && podman image exists "$image"; then
    have="$(podman image inspect --format '{{index .Labels "io.nodesleuth.source"}} {{index .Labels "io.nodesleuth.rootfs"}}' "$image")"
    if [ "$have" = "$src_digest Debian $suite, key $key" ]; then
        echo "$image is up to date (source $src_digest, rootfs key $key)"
        exit 0
    fi
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/nodesleuth-image.XXXXXX")"
ctr=""
cleanup() {
    if [ -n "$ctr" ]; then
        buildah umount "$ctr" >/dev/null 2>&1 || true
        buildah rm "$ctr" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
    rm -f "$tarball.part"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$refresh" = 1 ]; then
    rm -f "$tarball"
    podman image exists "$base" && podman rmi "$base" >/dev/null 2>&1 || true
fi
if ! podman image exists "$base"; then
    if [ ! -s "$tarball" ]; then
        echo "build.sh: making the root file system (Debian $suite, mmdebstrap; key $key)" >&2
        nice -n 10 mmdebstrap ${MMDEBSTRAP_VERBOSE:---quiet} "${mmopts[@]}" --include="$packages" "$suite" "$tarball.part" \
            "deb $mirror $suite main" "deb $mirror $suite-updates main" "deb $security $suite-security main"
        mv "$tarball.part" "$tarball"
        # one tarball per package list: drop those of older lists
        find "$cache" -maxdepth 1 -name 'rootfs-*.tar' ! -name "rootfs-$suite-$key.tar" -delete
    fi
    echo "build.sh: importing $tarball as $base" >&2
    nice -n 10 podman import --quiet --message "Debian $suite: $packages" "$tarball" "$base" >/dev/null
fi

# ---- 2. the wheel, from a copy of the checkout (a build in place would leave build/ and *.egg-info) ----
mkdir -p "$work/src" "$work/wheel"
tar -C "$repo" --exclude=__pycache__ --exclude='*.egg-info' --exclude='*.pyc' \
    -cf - "${wheel_src[@]}" | tar -C "$work/src" -xf -
py="${PYTHON:-python3}"
# pip builds in an isolated environment with the build backend pyproject.toml names (fetched from the
# package index, or pip's cache), unless this interpreter already has a setuptools that writes wheels
# by itself (>= 70.1): then nothing is fetched at all.
iso=()
if "$py" -c 'import sys, setuptools; v = tuple(int(x) for x in setuptools.__version__.split(".")[:2]); sys.exit(v < (70, 1))' 2>/dev/null; then
    iso=(--no-build-isolation)
fi
PIP_DISABLE_PIP_VERSION_CHECK=1 nice -n 10 "$py" -m pip wheel --quiet --no-deps "${iso[@]}" -w "$work/wheel" "$work/src" >&2
whl="$(ls "$work"/wheel/nodesleuth-*.whl)"
case "$(basename "$whl")" in
    "nodesleuth-$version-"*) ;;
    *) die "the wheel $(basename "$whl") is not version $version (__init__.py and pyproject.toml disagree)" ;;
esac

# ---- 3. the image: base + the wheel under /usr/local ----
old_id="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
ctr="$(buildah from --quiet --pull=never "$base")"
mnt="$(buildah mount "$ctr")"
cp "$whl" "$mnt/tmp/"
# The image's own python3 runs Debian's python3-installer, so the script's #! is /usr/bin/python3.
# --prefix /usr: Debian's default install scheme (posix_local) adds the /local itself, giving
# /usr/local/lib/python3.13/dist-packages and /usr/local/bin/nodesleuth.
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    chroot "$mnt" /usr/bin/python3 -m installer --prefix /usr "/tmp/$(basename "$whl")"
rm -f "$mnt/tmp/$(basename "$whl")"
[ -x "$mnt/usr/local/bin/nodesleuth" ] || die "the wheel did not install /usr/local/bin/nodesleuth"
buildah umount "$ctr" >/dev/null
buildah config \
    --entrypoint '["/usr/local/bin/nodesleuth"]' --cmd '["--help"]' \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --env PYTHONUNBUFFERED=1 --workingdir / \
    --label org.opencontainers.image.title=nodesleuth \
    --label org.opencontainers.image.version="$version" \
    --label org.opencontainers.image.description="finds the hidden causes of intermittent CPU starvation on Linux nodes" \
    --label io.nodesleuth.rootfs="Debian $suite, key $key" \
    --label io.nodesleuth.source="$src_digest" \
    "$ctr"
buildah commit --quiet --rm "$ctr" "$image" >/dev/null
ctr=""
new_id="$(podman image inspect --format '{{.Id}}' "$image")"
# the image this one replaced under the same name (a rebuild of the same version) is dropped
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
    [ -z "$(podman image inspect --format '{{join .RepoTags ","}}' "$old_id" 2>/dev/null)" ] && \
        podman rmi "$old_id" >/dev/null 2>&1 || true
fi
if [ -n "$save" ]; then
    rm -f "$save"
    podman save --quiet --format docker-archive -o "$save" "$image"
fi

size="$(podman image inspect --format '{{.Size}}' "$image")"
end=$(date +%s.%N)
awk -v i="$image" -v s="$start" -v e="$end" -v b="$size" -v k="$key" \
    'BEGIN { printf "%s built in %.1f s: %.0f MB (%d bytes), rootfs key %s\n", i, e - s, b / 1e6, b, k }'
