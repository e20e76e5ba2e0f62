#!/bin/sh
# packages.sh [OUTDIR]: builds bin/baremetal-cloud-controller-manager and bin/baremetal-ccmctl
# (make build) and the baremetal-ccm deb and rpm packages (packaging/nfpm.yaml) into OUTDIR
# (default dist/).
# Prints the two package paths on stdout, one a line (deb first); progress goes to stderr.
#
# The package version is derived from `git describe --tags --match 'v[0-9]*'`:
#   v1.2.3 -> 1.2.3,  v1.2.3-rc.1 -> 1.2.3~rc.1 (sorts before 1.2.3),
#   5 commits after v1.2.3 -> 1.2.3+git5.g<sha> (sorts after it),
#   no tag -> 0.0.0+git<commit count>.g<sha>.
# PACKAGE_VERSION=... overrides it (same deb/rpm form: digits first, then [A-Za-z0-9.+~]).
# nfpm is run from the Go module proxy, pinned: v2.45.2 is the newest whose whole
# dependency tree the proxy serves here (v2.48.0 needs modules it refuses).
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
nfpm="go run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2"

if [ ! -f systemd/baremetal-ccm.service ]; then
    echo "packages.sh: systemd/baremetal-ccm.service is missing; the packages ship that unit file" >&2
    exit 1
fi

out=${1:-dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [ -z "$PACKAGE_VERSION" ]; then
    if desc=$(git describe --tags --match 'v[0-9]*' --long 2>/dev/null); then
        # desc is <tag>-<commits since tag>-g<sha>
        tag=${desc%-*-g*}
        rest=${desc#"$tag"-}
        n=${rest%%-*}
        sha=${rest#*-g}
        # A semver pre-release (first '-') becomes '~'; any other '-' is not allowed in an
        # rpm version and would start the Debian revision, so it becomes '.'.
        base=$(printf '%s\n' "${tag#v}" | sed 's/-/~/; s/-/./g')
        if [ "$n" = 0 ]; then
            PACKAGE_VERSION=$base
        else
            PACKAGE_VERSION=$base+git$n.g$sha
        fi
    else
        PACKAGE_VERSION=0.0.0+git$(git rev-list --count HEAD).g$(git rev-parse --short HEAD)
    fi
fi
case "$PACKAGE_VERSION" in
[0-9]*) ;;
*) echo "packages.sh: version $PACKAGE_VERSION must start with a digit" >&2; exit 1 ;;
esac
if printf '%s' "$PACKAGE_VERSION" | grep -q '[^A-Za-z0-9.+~]'; then
    echo "packages.sh: version $PACKAGE_VERSION: only letters, digits and . + ~ are allowed" >&2
    exit 1
fi
export PACKAGE_VERSION
# File times in the packages are the last commit's, not the build's.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
export SOURCE_DATE_EPOCH

echo "packages.sh: building the binaries (make build)" >&2
make --no-print-directory build >&2

deb=$out/baremetal-ccm_${PACKAGE_VERSION}-1_amd64.deb
rpm=$out/baremetal-ccm-${PACKAGE_VERSION}-1.x86_64.rpm
echo "packages.sh: packaging version $PACKAGE_VERSION with nfpm" >&2
# Both at once: xz compression of the ~70 MB binary is most of the time, on one core each.
$nfpm pkg --config packaging/nfpm.yaml --packager deb --target "$deb" >&2 &
debpid=$!
$nfpm pkg --config packaging/nfpm.yaml --packager rpm --target "$rpm" >&2 || { wait "$debpid" || true; exit 1; }
wait "$debpid"
echo "$deb"
echo "$rpm"
