# Sourced by gpu_figures.sh and gpu_decode.sh (after they set C, the commit, and OUT, the results folder).
# bench_with SCRIPT PATTERN LIMIT NAME ARGS...: one benchmark run under its own time limit, its output in
#   $OUT/NAME.stdout, its exit code and the lines matching PATTERN printed.
# watch_gpu PART: `nvidia-smi dmon` (power, clocks) into $OUT/dmon_partPART.txt until the script exits.
bench_with() {
    local script=$1 pattern=$2 limit=$3 name=$4
    shift 4
    timeout "$limit" python3 "$script" --tokenizer .cache/tok --commit "$C" --out "$OUT" \
        --name "$name" "$@" > "$OUT/${name%.json}.stdout" 2>&1
    echo "$name: rc $?"
    grep -E "$pattern" "$OUT/${name%.json}.stdout" | cut -c1-300 | tail -20
}
watch_gpu() {
    mkdir -p "$OUT"
    if command -v nvidia-smi > /dev/null; then
        nvidia-smi dmon -s pucv -d 1 -o T > "$OUT/dmon_part$1.txt" 2>&1 &
        DMON=$!
        trap 'kill $DMON 2> /dev/null' EXIT
    fi
}
