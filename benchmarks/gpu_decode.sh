#!/usr/bin/env bash
# The decode figures BENCHMARKS.md quotes (GENERATE, EXTRACT: DESIGN.md "Workloads"), in two parts that
# each fit one device command (under 600 s on an H200), and the compiled GPU tests: part 1 GENERATE in bf16
# (and a quarter of it with the steps launched kernel by kernel, no CUDA graphs) and in FP8 (its first 32
# tokens compared with bf16's); part 2 transformers' `generate` on a sample of GENERATE's prompts,
# EXTRACT with shared-prefix decode on and off.
# Every step has its own time limit; results and logs go to $OUT (default benchmarks/results/decode_h200_<commit>),
# with `nvidia-smi dmon` beside each part.
#
#   bash benchmarks/gpu_decode.sh 1      # needs the tokenizer in .cache/tok and .cache/commit (the commit)
#   bash benchmarks/gpu_decode.sh 2
#   bash benchmarks/gpu_decode.sh tests  # kernels, CUDA ops, decode (LIMIT seconds, default 240; TESTS)
#   bash benchmarks/gpu_decode.sh all    # decode tests and every figure in one call (sizes as above, HF_SIZE)
# GEN_SIZE / EXT_SIZE pass size overrides (e.g. GEN_SIZE="--size gen_prompts=1024"), recorded in the results.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.:benchmarks${PYTHONPATH:+:$PYTHONPATH}
C=$(cat .cache/commit 2>/dev/null || git rev-parse --short HEAD)
OUT=${OUT:-benchmarks/results/decode_h200_$C}
. benchmarks/device_steps.sh
bench() {  # limit name args...
    bench_with benchmarks/gpu_decode.py "gpu_decode (GENERATE|EXTRACT)|Error|error" "$@"
}
watch_gpu "${1:-x}"
case "${1:-}" in
1)
    bench 150 generate_bf16.json --sections GENERATE ${GEN_SIZE:-}
    bench 90 generate_bf16_nographs.json --sections GENERATE --no-cuda-graphs --size gen_prompts=1024
    bench 140 generate_fp8.json --sections GENERATE --quantize fp8 ${GEN_SIZE:-}
    bench 60 generate_bf16_profile.json --sections GENERATE --size gen_prompts=256 --size gen_tokens=32 --profile
    ;;
all)  # one call (under 600 s): the decode tests compiled, then every figure (EXTRACT and HF at EXT_SIZE / HF_SIZE)
    QUAIL_TOKENIZER=$PWD/.cache/tok timeout 90 python3 -m pytest -q -rf -p no:cacheprovider \
        tests/quail_kernels/test_decode_attention.py tests/engine/test_decode.py \
        tests/gpu_worker_cuda/test_cuda_ops.py -k "decode" > "$OUT/gpu_tests_decode_h200.log" 2>&1
    echo "compiled decode tests: rc $?"; grep -E "^FAILED|^ERROR" "$OUT/gpu_tests_decode_h200.log" | cut -c1-300
    tail -1 "$OUT/gpu_tests_decode_h200.log"
    bench 100 generate_bf16.json --sections GENERATE ${GEN_SIZE:-}
    bench 100 generate_fp8.json --sections GENERATE --quantize fp8 ${GEN_SIZE:-}
    bench 90 extract_bf16.json --sections EXTRACT ${EXT_SIZE:-}
    bench 90 extract_bf16_unshared.json --sections EXTRACT --no-shared-decode ${EXT_SIZE:-}
    bench 110 generate_hf.json --sections HF ${HF_SIZE:-}
    ;;
tests)  # the compiled kernel, CUDA-ops and decode tests (TESTS: a subset)
    QUAIL_TOKENIZER=$PWD/.cache/tok timeout ${LIMIT:-240} python3 -m pytest -v -rf -p no:cacheprovider \
        ${TESTS:-tests/quail_kernels tests/gpu_worker_cuda tests/engine/test_decode.py} > "$OUT/gpu_tests_h200.log" 2>&1
    echo "compiled GPU tests: rc $?"; grep -E "^FAILED|^ERROR" "$OUT/gpu_tests_h200.log" | cut -c1-300; tail -1 "$OUT/gpu_tests_h200.log"
    ;;
2)
    bench 150 generate_hf.json --sections HF
    bench 200 extract_bf16.json --sections EXTRACT --profile ${EXT_SIZE:-}
    bench 200 extract_bf16_unshared.json --sections EXTRACT --no-shared-decode ${EXT_SIZE:-}
    ;;
*)
    echo "usage: bash benchmarks/gpu_decode.sh 1|2|all|tests" >&2
    exit 2
    ;;
esac
