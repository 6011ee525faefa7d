#!/usr/bin/env bash
# Build Jaeger's web UI (github.com/jaegertracing/jaeger-ui) from source and cache
# it beside the Jaeger binary. The UI is a separate project: not in Jaeger's Go
# module (so build.sh's binary serves only a placeholder page) and not on the npm
# registry. Jaeger serves the built directory through
# `extensions.jaeger_query.ui.assets_path` (stack/jaeger.py sets it).
#
# stdout: ONLY the path of the built UI directory (index.html + static/).
# stderr: progress, or one line saying why there is no UI.
# Exit status:
#   0  built, or cached for the pinned tag (path printed)
#   2  not built here: no Node.js/npm, or no source (no JAEGER_UI_SOURCE and the
#      pinned tag cannot be cloned). Jaeger then serves its API only.
#   1  a build was attempted and failed (checksum mismatch, npm error, ...)
#
# Environment:
#   JAEGER_UI_SOURCE    where the source comes from: a tarball of the pinned tag
#                       (`git archive`, .tar.gz; its sha256 must match the pin
#                       below) or an unpacked source directory (left untouched: it
#                       is copied). Unset: `git clone` of the pinned tag.
#   JAEGER_UI_REPO      the repository to clone (default: jaegertracing/jaeger-ui on
#                       GitHub); the clone must still be the pinned commit.
#   JAEGER_VERSION      as in build.sh: the UI lands in
#   PRICING_CACHE_DIR   $PRICING_CACHE_DIR/jaeger/$JAEGER_VERSION/ui
#                       (default cache root ~/.cache/pricingservice).
#
# The cached build is reused until the pin below changes (ui/.pin records it).
set -euo pipefail

# The jaeger-ui release for Jaeger module v1.76.0 (Jaeger v2.13.0) carries the same
# tag. To move Jaeger on, change all three pins together (and build.sh's, and
# stack/jaeger.py's JAEGER_VERSION; a test checks they agree).
JAEGER_UI_TAG="v1.76.0"
JAEGER_UI_COMMIT="1ceadb6f6fb29774bfaa77a6148499ff7a04902b"
# sha256 of `git archive --prefix=jaeger-ui-1.76.0/ v1.76.0 | gzip` as published
# in ../shared/vendor (GitHub's own tarball of the tag may differ byte-wise).
JAEGER_UI_TARBALL_SHA256="5ee4d86a6489361bb2b9f17be5e7cc0a8021543432981e188d1de9811788a398"
JAEGER_UI_REPO="${JAEGER_UI_REPO:-https://github.com/jaegertracing/jaeger-ui}"
# The UI's package.json asks for Node >= 24; its build works on 20 with
# engine-strict off (checked with 20.20 and npm 11).
NODE_MIN_MAJOR=20

JAEGER_VERSION="${JAEGER_VERSION:-v1.76.0}"
pin="$JAEGER_UI_TAG $JAEGER_UI_COMMIT"

# Everything except the final path goes to stderr; fd 3 is the real stdout.
exec 3>&1 1>&2

log() { printf 'jaeger-ui: %s\n' "$*" >&2; }
die() { printf 'jaeger-ui: error: %s\n' "$*" >&2; exit 1; }
# One line, exit 2: the caller carries on with Jaeger's API only.
unavailable() { printf 'jaeger-ui: %s; Jaeger serves its API only (no web UI)\n' "$*" >&2; exit 2; }

cache_root="${PRICING_CACHE_DIR:-$HOME/.cache/pricingservice}"
out_dir="$cache_root/jaeger/$JAEGER_VERSION"
out="$out_dir/ui"

is_current() {
    [[ -f "$out/index.html" && -f "$out/.pin" && "$(<"$out/.pin")" == "$pin" ]]
}

# Fast path: runs on every `make jaeger`.
if is_current; then
    printf '%s\n' "$out" >&3
    exit 0
fi

command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 \
    || unavailable "Node.js and npm not found (Node >= $NODE_MIN_MAJOR builds it)"
node_version="$(node --version)"
node_major="${node_version#v}"
node_major="${node_major%%.*}"
[[ "$node_major" =~ ^[0-9]+$ && "$node_major" -ge "$NODE_MIN_MAJOR" ]] \
    || unavailable "Node.js $node_version is too old (need >= $NODE_MIN_MAJOR)"

source_spec="${JAEGER_UI_SOURCE:-}"
if [[ -n "$source_spec" && ! -e "$source_spec" ]]; then
    die "JAEGER_UI_SOURCE=$source_spec does not exist"
fi
if [[ -z "$source_spec" ]] && ! command -v git >/dev/null 2>&1; then
    unavailable "no JAEGER_UI_SOURCE and no git to clone $JAEGER_UI_REPO $JAEGER_UI_TAG"
fi

mkdir -p "$out_dir"
# Concurrent callers: the second waits for the first, then takes the fast path.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$out_dir/.ui-build.lock"
    if ! flock -n 9; then
        log "another build of the UI is running; waiting for it"
        flock 9
    fi
    if is_current; then
        printf '%s\n' "$out" >&3
        exit 0
    fi
fi
# Only the lock holder builds, so leftovers of a killed build can go.
rm -rf "$out_dir"/.ui.tmp.* "$out_dir"/.ui.old.*

# node_modules (~1,400 packages) lives only as long as the build.
work="$(mktemp -d "${TMPDIR:-/tmp}/jaeger-ui-build.XXXXXX")"
tmp_out="$out_dir/.ui.tmp.$$"
cleanup() { rm -rf "$work" "$tmp_out"; }
trap cleanup EXIT
src="$work/src"
mkdir -p "$src"

start=$SECONDS
if [[ -z "$source_spec" ]]; then
    log "cloning $JAEGER_UI_REPO at $JAEGER_UI_TAG"
    git clone --quiet --depth 1 --branch "$JAEGER_UI_TAG" "$JAEGER_UI_REPO" "$src" 2>"$work/git.log" \
        || unavailable "could not clone $JAEGER_UI_REPO $JAEGER_UI_TAG ($(tail -n1 "$work/git.log")); set JAEGER_UI_SOURCE to a source tarball or directory"
    commit="$(git -C "$src" rev-parse HEAD)"
    [[ "$commit" == "$JAEGER_UI_COMMIT" ]] \
        || die "tag $JAEGER_UI_TAG of $JAEGER_UI_REPO is commit $commit, pinned $JAEGER_UI_COMMIT"
elif [[ -f "$source_spec" ]]; then
    sum="$(sha256sum "$source_spec" | cut -d' ' -f1)"
    [[ "$sum" == "$JAEGER_UI_TARBALL_SHA256" ]] \
        || die "$source_spec: sha256 $sum, expected $JAEGER_UI_TARBALL_SHA256 (jaeger-ui $JAEGER_UI_TAG)"
    log "unpacking $source_spec (sha256 verified)"
    tar -xzf "$source_spec" -C "$src" --strip-components=1 || die "cannot unpack $source_spec"
else
    log "copying $source_spec"
    tar -C "$source_spec" --exclude=./node_modules --exclude='./packages/*/node_modules' \
        --exclude='./packages/*/build' -cf - . | tar -C "$src" -xf - \
        || die "cannot copy $source_spec"
fi

# A directory could hold any release: check it is the pinned one.
version="$(sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' \
    "$src/packages/jaeger-ui/package.json" 2>/dev/null | head -n1)"
[[ "$version" == "${JAEGER_UI_TAG#v}" ]] \
    || die "source ${source_spec:-clone} is jaeger-ui '${version:-?}', pinned ${JAEGER_UI_TAG#v}"

# The repo's .npmrc sets engine-strict=true and package.json wants Node >= 24: off.
# --ignore-scripts skips husky's git hooks (the tree is not a git checkout).
# nice: this runs on shared 2-core machines next to tests.
npm_flags=(--no-audit --no-fund --engine-strict=false)
log "npm ci with Node $node_version (~1,400 packages; ~40 s with a warm npm cache)"
(cd "$src" && nice -n 10 npm ci "${npm_flags[@]}" --ignore-scripts) >"$work/npm.log" 2>&1 || {
    tail -n 30 "$work/npm.log" >&2
    die "npm ci failed (see above)"
}
log "npm run build (~1.5-2 min on 2 cores)"
(cd "$src" && nice -n 10 npm run build "${npm_flags[@]}") >>"$work/npm.log" 2>&1 || {
    tail -n 30 "$work/npm.log" >&2
    die "npm run build failed (see above)"
}
built="$src/packages/jaeger-ui/build"
[[ -f "$built/index.html" ]] || die "the build left no $built/index.html"

mv "$built" "$tmp_out"
printf '%s\n' "$pin" >"$tmp_out/.pin"
# Swap in the new build; a killed run leaves either the old or the new one.
if [[ -e "$out" ]]; then
    mv "$out" "$out_dir/.ui.old.$$"
fi
mv "$tmp_out" "$out"
rm -rf "$out_dir/.ui.old.$$"
# node_modules goes now, inside the timed part: deleting it is not free.
rm -rf "$work"
log "built $out ($(du -sh "$out" | cut -f1)) in $((SECONDS - start)) s"
printf '%s\n' "$out" >&3
