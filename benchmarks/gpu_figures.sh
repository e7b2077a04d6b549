#!/usr/bin/env bash
# The GPU figures BENCHMARKS.md quotes, in two parts that each fit one device command (under 600 s on an
# H200): part 1 BIO-2 at full size in bf16 then FP8 (signs compared with the bf16 margins) and the compiled
# test suite; part 2 the workloads in bf16 (128 prompts timed in transformers) and FP8, SUSTAINED and the
# profile (profile_public.py).
# Every step has its own time limit, so a slow one does not cost the steps after it; results and logs go
# to $OUT (default benchmarks/results/h200_<commit>), with `nvidia-smi dmon` (power, clocks) beside each part.
# The lent device returns at most 8 files: there, write to a folder and pack it into its $OUT, e.g.
#   O=$OUT; OUT=/tmp/r bash benchmarks/gpu_figures.sh 1; tar czf $O/part1.tgz -C /tmp/r .
#
#   bash benchmarks/gpu_figures.sh 1      # needs the tokenizer in .cache/tok and .cache/commit (the commit)
#   bash benchmarks/gpu_figures.sh 2
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
C=$(cat .cache/commit 2>/dev/null || git rev-parse --short HEAD)
OUT=${OUT:-benchmarks/results/h200_$C}
. benchmarks/device_steps.sh
bench() {  # limit name args...
    bench_with benchmarks/public_bench.py "BIO-2 text|fp8 vs bf16|FILTER:|CHAIN:|JOIN run|PREFIX:|SUSTAINED" "$@"
}
case "${1:-}" in
1 | 2) watch_gpu "$1" ;;
esac
case "${1:-}" in
1)
    bench 170 bio2.json --sections BIO2 --bio2-ids-anchors 0 --margins /tmp/m
    bench 130 bio2_fp8.json --sections BIO2 --bio2-ids-anchors 0 --quantize fp8 --margins /tmp/m
    QUAIL_TOKENIZER=$PWD/.cache/tok timeout 240 make test-installed > "$OUT/make_test_installed_h200.log" 2>&1
    echo "make test-installed: rc $?"; tail -1 "$OUT/make_test_installed_h200.log"
    ;;
2)
    bench 130 wl_bf16.json --sections WORKLOADS --hf-sample 128 --margins /tmp/m
    bench 90 wl_fp8.json --sections WORKLOADS --hf-sample 0 --quantize fp8 --margins /tmp/m
    bench 150 sustained.json --sections SUSTAINED --hf-sample 0
    timeout 150 python3 benchmarks/profile_public.py --tokenizer .cache/tok --commit "$C" --out "$OUT" \
        --name profile_bf16.json > "$OUT/profile_bf16.stdout" 2>&1
    echo "profile_public: rc $?"; grep -E "^.{24}(FILTER|JOIN|BIO-2)" "$OUT/profile_bf16.stdout" | cut -c1-200
    ;;
*)
    echo "usage: bash benchmarks/gpu_figures.sh 1|2" >&2
    exit 2
    ;;
esac
