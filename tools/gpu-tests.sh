#!/bin/bash
# The GPU test command, `GPUCOMM_REQUIRE_GPU=1 cargo test --workspace --release`,
# for a GPU machine without a Rust toolchain: build every test binary here,
# run them there with the variable set (doc tests, which need rustdoc and no
# GPU, are left to the build machine).
#
#   tools/gpu-tests.sh pack gpu-tests.tar.xz   # here, in the repository
#   tools/gpu-tests.sh run gpu-tests.tar.xz    # there, in a copy of the same commit
#
# The binaries were compiled with this checkout's absolute paths
# (CARGO_MANIFEST_DIR, CARGO_BIN_EXE_gpucomm) and the calibration data in
# ../shared beside it; `run` recreates both paths (a symlink to the copy it
# runs in, and ../shared from the archive) when they are missing. Exit
# status: 0 when every binary passed.
set -euo pipefail
cmd=${1:-}; archive=${2:-}
[ -n "$cmd" ] && [ -n "$archive" ] || { sed -n 2,15p "$0"; exit 2; }
case $cmd in
pack)
    root=$(pwd)
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    cargo build --release -p gpucomm-cli
    cargo test --workspace --release --no-run --message-format=json 2>/dev/null |
        python3 -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])' > "$tmp/list"
    mkdir -p "$tmp/a/bin" "$tmp/a/shared"
    while read -r b; do strip -o "$tmp/a/bin/$(basename "$b")" "$b"; done < "$tmp/list"
    strip -o "$tmp/a/gpucomm" target/release/gpucomm
    cp -r ../shared/calibration "$tmp/a/shared/"
    echo "$root" > "$tmp/a/root"
    git rev-parse HEAD > "$tmp/a/commit"
    tar -C "$tmp/a" -cJf "$archive" .
    echo "$archive: $(wc -l < "$tmp/list") test binaries of $(cat "$tmp/a/commit"), built in $root"
    ;;
run)
    here=$(pwd)
    tmp=$(mktemp -d)
    tar -C "$tmp" -xJf "$archive"
    root=$(cat "$tmp/root")
    if [ "$root" != "$here" ] && [ ! -e "$root" ]; then
        mkdir -p "$(dirname "$root")"; ln -s "$here" "$root"
    fi
    [ -e "$here/../shared" ] || ln -s "$tmp/shared" "$here/../shared"
    mkdir -p target/release && cp "$tmp/gpucomm" target/release/gpucomm
    echo "# test binaries of $(cat "$tmp/commit"); GPUCOMM_REQUIRE_GPU=1"
    export GPUCOMM_REQUIRE_GPU=1
    failed=0
    for b in "$tmp"/bin/*; do
        if ! "$b" > "$tmp/log" 2>&1; then
            failed=$((failed + 1)); echo "FAILED: $(basename "$b")"; tail -40 "$tmp/log"
        fi
        grep -h '^test result' "$tmp/log" | sed "s|^|$(basename "$b"): |"
    done
    echo "# $failed test binaries failed"
    [ "$failed" = 0 ]
    ;;
*) sed -n 2,15p "$0"; exit 2 ;;
esac
