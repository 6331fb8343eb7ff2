# The recipe each head of a matched pair trains with (scripts/list_heads.sh, scripts/open_heads.sh): K=8 depths,
# rows and batches of ~512 tokens, lr 1e-3 after 10 warm-up steps, one thread (the two heads train side by side),
# float32 target features, no evaluation while training. Needs CLI, the peagle-lab command as an array.
#
#   pair_train MODE OUT_DIR LOG NOTE [more train arguments: data, features, start, budget, seed]
pair_train() {
  local mode=$1 out=$2 log=$3 note=$4
  shift 4
  "${CLI[@]}" train --mode "$mode" -K 8 --out "$out" --batch-tokens 512 --row-tokens 512 --lr 1e-3 \
    --warmup-steps 10 --threads 1 --dtype float32 --eval-prompts 0 --eval-val-prompts 0 --overwrite \
    --note "$note" "$@" > "$log" 2>&1
}
