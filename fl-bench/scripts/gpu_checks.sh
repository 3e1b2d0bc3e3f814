#!/bin/bash
# The GPU figures of README's "Packs of runs" table, on a machine with a CUDA libtorch and
# MNIST in $FL_DATA_DIR, from the repository root:
#   fl-bench/scripts/gpu_checks.sh FL_BINARY PACK_DIR [SECONDS] [CELL_TOML [CHECK_TOML...]]
# PACK_DIR holds prepared run directories (each with an experiment.toml), for example the
# kdd23 full MNIST column from
#   cargo xtask reproduce kdd23 --scale full --only mnist --emit slurm DIR --out OUT
# (DIR/experiments/<i>.toml copied to PACK_DIR/<i>/experiment.toml). Prints the quickstart's
# wall time on CUDA and on CPU, then runs PACK_DIR as one pack for at most SECONDS (default
# 320) and prints how many rounds each run reached and the GPU's utilisation meanwhile. With
# CELL_TOML (one run's experiment, say the kdd23 cell with its rounds cut to 40, or the cos2p
# row's, whose Adan and distillation steps are captured too), it first runs that alone with CUDA
# graphs, with graphs kept across cohorts ([trainer] keep_graphs = true) and without graphs
# ([trainer] cuda_graphs = false), prints the three and whether the first two's metrics are
# byte-identical with the eager run's. Last, FedDyn, MOON, ASO-Fed and augmentation (on 2
# rounds of FedAvg) and each CHECK_TOML (an experiment with a [trainer] section), each eager,
# with graphs and with kept graphs, and whether their metrics are identical. The end-to-end ratios are `cargo
# xtask bench` (or its end_to_end binary with FL_BENCH_DIR set).
set -u
fl=$1 dir=$2 seconds=${3:-320} cell=${4:-}
if [ -n "$cell" ]; then
    kept=$(mktemp --suffix=-kept.toml) eager=$(mktemp --suffix=-eager.toml)
    sed '/^\[trainer\]/a keep_graphs = true' "$cell" > "$kept"
    sed '/^\[trainer\]/a cuda_graphs = false' "$cell" > "$eager"
    outs=()
    for toml in "$cell" "$kept" "$eager"; do
        out=$(mktemp -d)
        outs+=("$out")
        echo "cell $(basename "$toml"): $("$fl" run "$toml" --out "$out" --device cuda --workers 1 --quiet | head -1)"
    done
    for i in 0 1; do
        cmp -s "${outs[$i]}/metrics.csv" "${outs[2]}/metrics.csv" && same=identical || same=DIFFERENT
        echo "cell metrics $([ $i = 0 ] && echo with graphs || echo with kept graphs) and eager: $same"
    done
    # Where a round's time goes besides its steps: the kept-graphs cell evaluated once at the
    # end instead of after every round; its timing.csv's rounds (host seconds at each
    # evaluation) give the first round, with its captures, apart from the others.
    once=$(mktemp --suffix=-evaluated-once.toml) out=$(mktemp -d)
    sed 's/^every_aggregations = 1$/every_aggregations = 1000000/' "$kept" > "$once"
    echo "cell $(basename "$once"): $("$fl" run "$once" --out "$out" --device cuda --workers 1 --quiet | head -1)"
    echo "cell with kept graphs, host seconds at rounds 0, 1, 2, 10, 40: $(awk -F, 'NR == 2 || NR == 3 || NR == 4 || NR == 12 || NR == 42 { printf "%s ", $2 }' "${outs[1]}/timing.csv")"
fi
for device in cuda cpu; do
    out=$(mktemp -d)
    echo "quickstart $device: $("$fl" run experiments/quickstart.toml --out "$out" --device "$device" --quiet | head -1)"
done
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader -l 10 > "$dir/gpu-utilisation.txt" &
smi=$!
start=$(date +%s)
(cd "$dir" && timeout "$seconds" "$fl" pack $(ls -d */) --device cuda --workers 1 --force > pack.txt 2>&1)
echo "pack: exit status $?, $(( $(date +%s) - start )) s"
kill $smi
for run in "$dir"/*/; do echo "$(( $(wc -l < "$run/metrics.csv") - 2 ))"; done | sort -n | uniq -c |
    awk '{print "  " $1 " run(s) at " $2 " round(s)"}'
echo "GPU utilisation and memory every 10 s: $(tr '\n' ';' < "$dir/gpu-utilisation.txt")"
# The options whose steps are captured since 2026-11-29, each on benchmark (a)'s FedAvg cut to
# 2 rounds (the second starts from the state the first left, and replays the graphs the first
# kept where keep_graphs is on), and the experiments given after CELL_TOML: each eager, with
# graphs, and with kept graphs ([trainer] keep_graphs = true, where the options keep them),
# and whether each graph run's metrics are the eager run's; where one differs, eager again,
# which tells a capture's error from kernels that vary run to run. Last, so that the time
# limit cuts these and not the figures above.
checks=$(mktemp -d)
for opt in "dyn_alpha = 0.01" "moon_mu = 1.0" "aso_beta = 0.5" "augment = { translate = 2, flip = true }"; do
    sed -e 's/^rounds = 10$/rounds = 2/' -e "/^\[trainer\]/a $opt" fl-bench/experiments/fedavg-mnist-iid.toml \
        > "$checks/${opt%% *}.toml"
done
# Runs `$1` with `$2` added to its [trainer] section; prints the run's directory.
run_with() {
    local config out
    config=$(mktemp --suffix=.toml) out=$(mktemp -d)
    sed "/^\[trainer\]/a $2" "$1" > "$config"
    "$fl" run "$config" --out "$out" --device cuda --workers 1 --quiet > /dev/null
    echo "$out"
}
for toml in "$checks"/*.toml "${@:5}"; do
    eager=$(run_with "$toml" "cuda_graphs = false")
    line="$(basename "$toml"): metrics against eager:"
    differs=no
    for how in "graphs" "kept graphs"; do
        extra="cuda_graphs = true"
        [ "$how" = "kept graphs" ] && extra="keep_graphs = true"
        out=$(run_with "$toml" "$extra")
        if cmp -s "$out/metrics.csv" "$eager/metrics.csv"; then
            line="$line $how identical;"
        else
            line="$line $how DIFFERENT;"
            differs=yes
        fi
    done
    if [ $differs = yes ]; then
        again=$(run_with "$toml" "cuda_graphs = false")
        cmp -s "$again/metrics.csv" "$eager/metrics.csv" && line="$line eager twice identical" ||
            line="$line eager twice DIFFERENT"
    fi
    echo "$line"
done
