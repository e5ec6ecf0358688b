#!/usr/bin/env bash
# Compares `gpucomm sim` collective sweeps between two builds and prints the
# rows whose time moved (more than 0.05%), so a model change shows what it
# touches and what it leaves alone.
#
#   tools/sim_compare.sh OLD_BINARY NEW_BINARY [COMMANDS_FILE]
#
# COMMANDS_FILE holds one `gpucomm sim` argument list per line (without
# `gpucomm sim`); by default a set of sweeps over the presets, protocols
# and node counts the calibration and docs use. To build an old binary
# beside the new one:
#   git worktree add /tmp/old <commit> && (cd /tmp/old &&
#     CARGO_TARGET_DIR=$PWD/../gpucomm-old cargo build --release -p gpucomm-cli)
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,13p' "$0"
  exit 2
fi
old=$1
new=$2
default_sweeps() {
  cat <<'CMDS'
all_reduce --topology dgx-a100 -b 1M -e 8G -f 4
all_reduce --topology dgx-h100 -b 1M -e 8G -f 4 --algorithm ring
all_reduce --topology dgx-h100 -b 8 -e 8G -f 16
broadcast --topology dgx-h100 -b 1M -e 8G -f 8
broadcast --topology dgx-a100 -b 1M -e 8G -f 8
reduce --topology dgx-h100 -b 1M -e 8G -f 8
all_gather --topology dgx-h100 -b 1M -e 8G -f 8
reduce_scatter --topology dgx-a100 -b 1M -e 8G -f 8
all_reduce --topology dgx-h100 -b 1M -e 8G -f 8 --algorithm tree
all_reduce --topology dgx1-v100 -b 1M -e 1G -f 4
all_reduce --topology dgx-a100 --nodes 2 -b 1M -e 8G -f 8
all_reduce --topology dgx-h100 --nodes 4 -b 1M -e 8G -f 8
broadcast --topology dgx-h100 --nodes 4 -b 1M -e 8G -f 8
all_gather --topology dgx-h100 --nodes 4 -b 8G -e 8G
all_reduce --topology pcie-8gpu -b 1M -e 1G -f 8
all_to_all --topology dgx-h100 -b 1M -e 1G -f 8
all_to_all --topology dgx-a100 -b 8 -e 1G -f 16
sendrecv --topology dgx-h100 -b 1M -e 1G -f 8
sendrecv --topology dgx-a100 -b 8 -e 1G -f 16
CMDS
}
# size, algorithm, protocol, time of each row of a sweep's table.
rows() {
  "$1" sim $2 2>/dev/null | awk '!/^#/ && NF >= 6 {print $1, $4, $5, $6}'
}
moved=0
while read -r args; do
  [ -z "$args" ] && continue
  out=$(paste -d' ' <(rows "$old" "$args") <(rows "$new" "$args") | awk '
    # A size one build printed and the other did not (an error, a sweep
    # cut short): say so rather than divide by an empty field.
    NF != 8 || $1 != $5 { print "  rows differ: " $0; next }
    { d = ($8 / $4 - 1) * 100;
      if (d > 0.05 || d < -0.05)
        printf "  %14s  %s %s %s  ->  %s %s %s  %+.1f%%\n", $1, $2, $3, $4, $6, $7, $8, d }')
  if [ -n "$out" ]; then
    moved=$((moved + 1))
    echo "== $args"
    echo "$out"
  fi
done < <(if [ $# -ge 3 ]; then cat "$3"; else default_sweeps; fi)
echo "# $moved sweep(s) moved" >&2
