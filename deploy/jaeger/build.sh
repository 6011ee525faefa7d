#!/usr/bin/env bash
# Build the Jaeger v2 all-in-one binary (github.com/jaegertracing/jaeger/cmd/jaeger)
# from its Go module and cache it, because no Jaeger release binary or image
# registry is reachable from these machines (see /work/shared/notes/toolchain.md).
#
# stdout: ONLY the path of the binary (so callers can do BIN=$(build.sh)).
# stderr: progress.
#
# Environment:
#   JAEGER_VERSION      Go module version of github.com/jaegertracing/jaeger
#                       (default pinned below; stack/jaeger.py passes its own pin).
#   PRICING_CACHE_DIR   cache root (default ~/.cache/pricingservice); the binary
#                       lands in $PRICING_CACHE_DIR/jaeger/$JAEGER_VERSION/jaeger.
#   GO                  go command (default: `go` on PATH, else /usr/local/go/bin/go).
#
# GOPATH/GOCACHE are left at Go's defaults on purpose: the ~1.7 GB module cache
# and ~1.6 GB build cache then survive between runs and other Go builds share them.
set -euo pipefail

# Module v1.76.0 is the Jaeger v2.13.0 release (the module keeps v1 tags; the v2
# number is only in CHANGELOG.md and in the Docker image tag).
JAEGER_VERSION="${JAEGER_VERSION:-v1.76.0}"
JAEGER_MODULE="github.com/jaegertracing/jaeger"

# Everything except the final path goes to stderr; fd 3 is the real stdout.
exec 3>&1 1>&2

log() { printf 'jaeger-build: %s\n' "$*" >&2; }
die() { printf 'jaeger-build: error: %s\n' "$*" >&2; exit 1; }

cache_root="${PRICING_CACHE_DIR:-$HOME/.cache/pricingservice}"
out_dir="$cache_root/jaeger/$JAEGER_VERSION"
out="$out_dir/jaeger"

binary_works() {
    [[ -x "$1" ]] && "$1" version >/dev/null 2>&1
}

# Fast path: must stay well under a second, it runs before every integration test.
if binary_works "$out"; then
    printf '%s\n' "$out" >&3
    exit 0
fi

if [[ -n "${GO:-}" ]]; then
    command -v "$GO" >/dev/null 2>&1 || die "GO=$GO is not an executable go command"
else
    GO="$(command -v go || true)"
    if [[ -z "$GO" && -x /usr/local/go/bin/go ]]; then
        GO=/usr/local/go/bin/go
    fi
    [[ -n "$GO" ]] || die "Go toolchain not found (no 'go' on PATH nor /usr/local/go/bin/go); install Go >= 1.24.6 to build Jaeger $JAEGER_VERSION"
fi

mkdir -p "$out_dir"

# Two concurrent callers (parallel test sessions) would otherwise both spend
# minutes building; the second waits and then takes the fast path.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$out_dir/.build.lock"
    if ! flock -n 9; then
        log "another build of $JAEGER_VERSION is running; waiting for it"
        flock 9
    fi
    if binary_works "$out"; then
        printf '%s\n' "$out" >&3
        exit 0
    fi
fi

# Only the lock holder builds, so leftovers of a SIGKILLed build can go.
rm -f "$out_dir"/.jaeger.tmp.*

work="$(mktemp -d "${TMPDIR:-/tmp}/jaeger-build.XXXXXX")"
tmp_bin="$out_dir/.jaeger.tmp.$$"
cleanup() {
    rm -f "$tmp_bin"
    # The module cache marks files read-only; make the copies deletable.
    chmod -R u+w "$work" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

start=$SECONDS
log "$("$GO" version)"
log "downloading $JAEGER_MODULE@$JAEGER_VERSION"
# Run outside any module (the work dir has no go.mod yet). This download is
# verified against the checksum database (reached through the Go proxy).
download_json="$(cd "$work" && GOFLAGS=-mod=mod "$GO" mod download -json "$JAEGER_MODULE@$JAEGER_VERSION")" \
    || die "could not download $JAEGER_MODULE@$JAEGER_VERSION from the Go module proxy (does this version exist? see: go list -m -versions $JAEGER_MODULE)"

modcache="$("$GO" env GOMODCACHE)"
jaeger_mod="$modcache/cache/download/$JAEGER_MODULE/@v/$JAEGER_VERSION.mod"
jaeger_dir="$modcache/$JAEGER_MODULE@$JAEGER_VERSION"
[[ -f "$jaeger_mod" ]] || die "missing $jaeger_mod after download"
[[ -f "$jaeger_dir/go.sum" ]] || die "missing $jaeger_dir/go.sum after download"

# `go install module@version` refuses modules whose go.mod has replace
# directives, and replace/exclude only take effect in the main module: hence a
# throw-away main module that repeats them.
go_line="$(grep -m1 -E '^go [0-9]' "$jaeger_mod")"
directives="$(awk '
    /^(replace|exclude)[ \t]*\(/ { block = 1; print; next }
    block { print; if ($0 ~ /^\)/) block = 0; next }
    /^(replace|exclude)[ \t]/ { print }
' "$jaeger_mod")"
{
    echo "module pricingservice.local/jaegerbuild"
    echo
    echo "$go_line"
    echo
    echo "require $JAEGER_MODULE $JAEGER_VERSION"
    echo
    # The tool directive (go >= 1.24 in go.mod) keeps the requirement alive
    # through `go mod tidy`: a main package cannot be imported from Go code.
    echo "tool $JAEGER_MODULE/cmd/jaeger"
    echo
    echo "$directives"
} >"$work/go.mod"
log "throw-away module $work: $go_line; repeated directives: ${directives//$'\n'/; }"

# Jaeger's own go.sum pins every dependency to the hash Jaeger's CI built with,
# and spares checksum-database lookups (unreachable for some modules on some
# of these machines).
cp "$jaeger_dir/go.sum" "$work/go.sum"
chmod u+w "$work/go.sum"

# -mod=mod: let go update go.mod/go.sum of the throw-away module.
# GOSUMDB stays on: with the seeded go.sum no dependency needs a lookup (checked
# with v1.76.0: tidy only added Jaeger's own two lines, from the verified
# download). If a lookup fails anyway, the message below names the way out.
GOFLAGS="$("$GO" env GOFLAGS) -mod=mod"
export GOFLAGS
export GOTOOLCHAIN=local

log "go mod tidy (first run downloads ~1.7 GB of modules)"
(cd "$work" && "$GO" mod tidy) \
    || die "go mod tidy failed (see above); if it is a checksum database lookup (sum.golang.org) that cannot be reached, rerun with GOSUMDB=off: hashes in Jaeger's go.sum are still enforced"

# Same flags as Jaeger's own release build (scripts/makefiles/BuildBinaries.mk
# and BuildInfo.mk), so `jaeger version` reports the release it is.
v2_version="$(grep -m1 -oE "^$JAEGER_VERSION / v2\.[0-9]+\.[0-9]+" "$jaeger_dir/CHANGELOG.md" || true)"
v2_version="${v2_version##* }"
v2_version="${v2_version:-$JAEGER_VERSION}"
vpkg="$JAEGER_MODULE/internal/version"
# The proxy records the tag's commit ("Origin" in `go mod download -json`).
commit="$(sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]*\)".*/\1/p' <<<"$download_json" | head -n1)"
ldflags="-X $vpkg.latestVersion=$v2_version -X $vpkg.commitSHA=$commit"
ldflags+=" -X $vpkg.date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"

log "go build $JAEGER_MODULE/cmd/jaeger ($v2_version; cold: ~530 CPU-s, ~4 min on 2 idle cores)"
(cd "$work" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "$ldflags" -o "$tmp_bin" "$JAEGER_MODULE/cmd/jaeger") \
    || die "go build failed (see messages above)"

binary_works "$tmp_bin" || die "built binary does not run: $tmp_bin version"
# Same directory, so the rename is atomic: a killed build never leaves a
# half-written $out behind.
mv -f "$tmp_bin" "$out"
log "built $out in $((SECONDS - start)) s"
printf '%s\n' "$out" >&3
