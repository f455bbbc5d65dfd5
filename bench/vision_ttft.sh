#!/usr/bin/env bash
# Time to first token of one image prompt (MiniCPM-V 4.7 shape: qwen35moe 35B-A3B text model +
# SigLIP-400m minicpmv4_6 vision encoder with the ViT merger) under a streaming memory budget, at image
# compression 4x and 16x, plus the per-slice encode time of llama.cpp's mtmd (embed_ref) vs les image-embed.
#
# usage: bench/vision_ttft.sh [LES_BINARY]
# environment (defaults in brackets):
#   LES        les binary [argument 1, else /tmp/les-ttft, copied from build-lead/les if missing]
#   TEXT       text model [/work/bench/q35-35b-a3b-img.gguf]     written with les synth when missing (~18.2 GiB)
#   MMPROJ     vision encoder [/work/bench/siglip-400m-16x.gguf] written with les synth when missing (~0.93 GiB)
#   IMG        image [/work/mtmd-ref/test-1344x1008.png]          written (photo-like PNG) when missing
#   EMBED_REF  llama.cpp mtmd reference encoder [/work/mtmd-ref/embed_ref] (skipped when absent)
#   TEXT_EMBD [2048] (the text model's n_embd, for a new mmproj)
#   WAIT_QUIET [0]: seconds to wait at most, before each run, for no cc1plus/ninja and CPUs < 15% busy
#   DROP_FIRST [0]: leave the first run of each compression out of the medians
#   MAX_OTHERS [5]: leave out runs during which other processes used more than this % of the CPUs
#   MEM [3G]  REPS [3]  EMBED_REPS [2]  THREADS [2]  OUT [/tmp/vision_ttft.$$] (logs)
# Each run lists the load before it and the CPU time other processes took during it; the medians
# leave out runs on a busy machine (the 2-core box is shared with builds).
set -euo pipefail

LES=${1:-${LES:-/tmp/les-ttft}}
if [[ ! -x $LES ]]; then
  cp "$(dirname "$0")/../build-lead/les" "$LES"
fi
TEXT=${TEXT:-/work/bench/q35-35b-a3b-img.gguf}
MMPROJ=${MMPROJ:-/work/bench/siglip-400m-16x.gguf}
IMG=${IMG:-/work/mtmd-ref/test-1344x1008.png}
EMBED_REF=${EMBED_REF:-/work/mtmd-ref/embed_ref}
MEM=${MEM:-3G}
REPS=${REPS:-3}
DROP_FIRST=${DROP_FIRST:-0}   # les reads the model with O_DIRECT: a first run pays no cold page cache (measured)
MAX_OTHERS=${MAX_OTHERS:-5}
EMBED_REPS=${EMBED_REPS:-2}
THREADS=${THREADS:-2}
OUT=${OUT:-/tmp/vision_ttft.$$}
mkdir -p "$OUT"
TIME=/usr/bin/time

# ---- inputs --------------------------------------------------------------------------------------
if [[ ! -f $TEXT ]]; then
  echo "writing $TEXT (les synth, minutes; needs ~20 GB of disk)" >&2
  df -h "$(dirname "$TEXT")" >&2
  "$LES" synth --shape qwen35-35b-a3b --type q4_K --image-tokens -t "$THREADS" -o "$TEXT" >"$OUT/synth-text.log" 2>&1
fi
# the mmproj's output width must be the text model's n_embd (qwen35-35b-a3b: 2048; les run refuses a mismatch)
N_EMBD=${TEXT_EMBD:-2048}
if [[ ! -f $MMPROJ ]]; then
  echo "writing $MMPROJ (text n_embd $N_EMBD)" >&2
  "$LES" synth --mmproj-shape siglip-400m --n-merge 4 --text-embd "$N_EMBD" -o "$MMPROJ" >"$OUT/synth-mmproj.log" 2>&1
fi
if [[ ! -f $IMG ]]; then
  echo "writing $IMG (1344x1008 photo-like PNG)" >&2
  /usr/bin/python3 - "$IMG" <<'EOF'
import math, random, struct, sys, zlib
W, H = 1344, 1008
random.seed(1)
rows = []
for y in range(H):
    r = bytearray([0])
    for x in range(W):
        u, v = x / W, y / H
        base = 0.5 + 0.5 * math.sin(6 * u + 3 * v) * math.cos(4 * v - 2 * u)
        n = random.random() * 0.08
        r += bytes((int(255 * min(1, max(0, base * c + n))) for c in (0.9, 0.7 + 0.3 * v, 0.5 + 0.5 * u)))
    rows.append(bytes(r))
raw = b"".join(rows)
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0)) \
    + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
open(sys.argv[1], "wb").write(png)
EOF
fi

load() { cut -d' ' -f1-3 /proc/loadavg; }
busy() { pgrep -c -x 'cc1plus|ninja' 2>/dev/null || true; }
# WAIT_QUIET=S: before each measured command wait (at most S seconds) for no cc1plus/ninja and the
# machine's CPUs under 15% busy over 5 s
quiet() {
  local end=$((SECONDS + ${WAIT_QUIET:-0})) a b
  while ((SECONDS < end)); do
    a=$(awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat)
    sleep 5
    b=$(awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat)
    [[ $(busy) == 0 ]] && awk -v a="$a" -v b="$b" 'BEGIN {split(a, x); split(b, y); exit !((y[1] - x[1]) < 0.15 * (y[2] - x[2]))}' && return
    sleep 5
  done
}
HZ=$(getconf CLK_TCK)
NCPU=$(nproc)
cpu_busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }  # all cores' busy jiffies
# CPU seconds the rest of the machine used while a command ran = all busy time - the command's user+sys
# (from /usr/bin/time -v in file $3), as a share of all cores over the wall time ($4 s): 0% = quiet machine
others() { awk -v b0="$1" -v b1="$2" -v hz="$HZ" -v n="$NCPU" -v w="$4" '
  /User time/ {u = $NF} /System time/ {s = $NF}
  END {o = (b1 - b0) / hz - u - s; if (o < 0) o = 0; printf "%.0f s = %.0f%% of %d cores", o, 100 * o / (n * w), n}' "$3"; }
others_pct() { awk -v b0="$1" -v b1="$2" -v hz="$HZ" -v n="$NCPU" -v w="$4" '
  /User time/ {u = $NF} /System time/ {s = $NF}
  END {o = (b1 - b0) / hz - u - s; if (o < 0) o = 0; printf "%.0f", 100 * o / (n * w)}' "$3"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

echo "les: $LES"; echo "text: $TEXT"; echo "mmproj: $MMPROJ"; echo "image: $IMG"; echo "logs: $OUT"
echo

# ---- TTFT runs, alternating the compressions -----------------------------------------------------
printf '%-4s %-4s %9s %9s %9s %6s %7s %8s %7s  %s\n' run comp ttft_s encode_s prefill_s pos vis_tok rss_MiB wall_s "load before (1/5/15 min), cc1plus/ninja | others' CPU during the run"
for ((i = 1; i <= REPS; i++)); do
  for c in 4 16; do
    f=$OUT/run-c$c-$i
    quiet; l0="$(load), $(busy)"
    b0=$(cpu_busy); t0=$(date +%s.%N)
    "$TIME" -v "$LES" run -m "$TEXT" --mmproj "$MMPROJ" --image "$IMG" -p "Describe this image." --chat \
      -n 4 --temp 0 -t "$THREADS" --mem "$MEM" --image-compression "$c" >"$f.out" 2>"$f.err" || {
      echo "run $i comp $c FAILED:" >&2; cat "$f.err" >&2; continue; }
    t1=$(date +%s.%N); b1=$(cpu_busy)
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
    oth=$(others "$b0" "$b1" "$f.err" "$wall")
    ttft=$(sed -n 's/^les: time to first token \([0-9.]*\) s.*/\1/p' "$f.err")
    enc=$(sed -n 's/^les: time to first token .*(image encoding \([0-9.]*\) s.*/\1/p' "$f.err")
    pos=$(sed -n 's/^les: time to first token .*prefill of \([0-9]*\) positions.*/\1/p' "$f.err")
    vis=$(sed -n 's/^les: [0-9]* images\{0,1\}: \([0-9]*\) visual tokens.*/\1/p' "$f.err")
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\).*/\1/p' "$f.err")
    pre=$(awk -v a="$ttft" -v b="$enc" 'BEGIN {printf "%.3f", a - b}')
    printf '%-4s %-4s %9s %9s %9s %6s %7s %8.0f %7s  %s | %s\n' "$i" "${c}x" "$ttft" "$enc" "$pre" "$pos" "$vis" "$((rss / 1024))" "$wall" "$l0" "$oth"
    echo "$i $c $ttft $enc $pre $pos $vis $rss $wall $(others_pct "$b0" "$b1" "$f.err" "$wall")" >>"$OUT/ttft.tsv"
  done
done
echo
grep -h '^les: memory\|^les: budget' "$OUT"/run-c16-1.err "$OUT"/run-c4-1.err 2>/dev/null | sort -u || true
grep -hi 'warn\|error' "$OUT"/run-*.err 2>/dev/null | sort -u || true
echo
# medians over the runs from DROP_FIRST+1 on whose machine was quiet (others' CPU <= MAX_OTHERS % of the cores)
first=$((DROP_FIRST + 1))
printf 'medians (runs %d..%d with others'"'"' CPU <= %s%%):\n%-5s %5s %9s %9s %9s %6s %9s\n' "$first" "$REPS" "$MAX_OTHERS" \
  comp n ttft_s encode_s prefill_s pos rss_MiB
for c in 4 16; do
  sel() { awk -v c="$c" -v f="$first" -v m="$MAX_OTHERS" -v k="$1" '$2 == c && $1 >= f && $10 <= m {print $k}' "$OUT/ttft.tsv"; }
  n=$(sel 3 | wc -l)
  rssm=$(sel 8 | sort -n | tail -1)
  printf '%-5s %5s %9s %9s %9s %6s %9.0f (max)\n' "${c}x" "$n" "$(sel 3 | median)" "$(sel 4 | median)" "$(sel 5 | median)" \
    "$(sel 6 | median)" "$((${rssm:-0} / 1024))"
  eval "med$c=$(sel 3 | median)"
done
[[ $med4 != - && $med16 != - ]] && awk -v a="$med16" -v b="$med4" 'BEGIN {printf "TTFT 4x / 16x = %.2f  (16x / 4x = %.3f); claim \"16x at least 2x faster\": %s\n", b / a, a / b, (b / a >= 2 ? "holds" : "does not hold")}'
echo

# ---- encoder alone: llama.cpp mtmd (embed_ref, the file's 16x) vs les image-embed 16x, per slice ---
echo "encoder alone, $THREADS threads, per image part (ms):"
for ((i = 1; i <= EMBED_REPS; i++)); do
  if [[ -x $EMBED_REF ]]; then
    quiet; l0="$(load), $(busy)"; b0=$(cpu_busy); t0=$(date +%s.%N)
    "$TIME" -v -o "$OUT/ref-$i.time" "$EMBED_REF" --mmproj "$MMPROJ" --image "$IMG" -o "$OUT/ref.f32" --threads "$THREADS" --repeat 1 >"$OUT/ref-$i.out" 2>&1 || cat "$OUT/ref-$i.out"
    t1=$(date +%s.%N); b1=$(cpu_busy)
    echo "  mtmd embed_ref #$i (load $l0 | others' CPU $(others "$b0" "$b1" "$OUT/ref-$i.time" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')")):"
    grep -E '^image [0-9]+|total|flash_attn' "$OUT/ref-$i.out" | sed 's/^/    /'
  fi
  quiet; l0="$(load), $(busy)"; b0=$(cpu_busy); t0=$(date +%s.%N)
  "$TIME" -v -o "$OUT/les-embed-$i.time" "$LES" image-embed --mmproj "$MMPROJ" --image "$IMG" -o "$OUT/les.f32" -t "$THREADS" --repeat 1 --image-compression 16 >"$OUT/les-embed-$i.out" 2>&1 || cat "$OUT/les-embed-$i.out"
  t1=$(date +%s.%N); b1=$(cpu_busy)
  echo "  les image-embed 16x #$i (load $l0 | others' CPU $(others "$b0" "$b1" "$OUT/les-embed-$i.time" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')")):"
  sed 's/^/    /' "$OUT/les-embed-$i.out"
done
