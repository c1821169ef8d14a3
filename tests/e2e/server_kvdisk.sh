# The KV cache on disk through the server (docs/kvcache.md "On disk", docs/server.md "Slots"):
# - --kv-cache-dir: a long system prompt's request is written when the server is idle; after a
#   restart the same request reports its prompt as cached and answers the same, and /metrics
#   counts the files; a damaged file is refused at start with a log line, never used;
# - slots: GET /slots; POST /slots/{id}?action=save|restore|erase in llama-server's shapes,
#   filenames confined to --slot-save-path (400 otherwise), 501 without it; a restored prefix
#   is cached for the next request after a restart.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash

KVD="$SRV_TMP/kv"
SYS=$(python3 -c "print(' '.join(['You are a careful assistant who answers geography questions briefly.']*12))")
M1="[{\"role\":\"system\",\"content\":\"$SYS\"},{\"role\":\"user\",\"content\":\"What is the capital of France?\"}]"
chat() { post /v1/chat/completions "{\"messages\":$1,\"temperature\":0}"; }

srv_start --kv-cache-dir "$KVD" --kv-cache-min-tokens 64 || { bad "server starts"; finish; exit 1; }
chat "$M1"
pyck "d['usage']['prompt_tokens_details']['cached_tokens']==0" && ok "first request: nothing cached" || bad "first: $BODY"
A1=$(pyget "d['choices'][0]['message']['content']"); P1=$(pyget "d['usage']['prompt_tokens']")
# written while idle
for i in $(seq 1 $((100 * SLOW))); do [ "$(metric g4tp_kv_disk_saves_total)" = 1 ] && break; sleep 0.1; done
[ "$(metric g4tp_kv_disk_saves_total)" = 1 ] && [ "$(metric g4tp_kv_disk_entries)" = 1 ] && [ "$(ls "$KVD" | grep -c '\.meta$')" = 1 ] \
  && ok "the finished request's prefix is written when idle" || bad "not written: $(ls "$KVD"); $(curl -s "$URL/metrics" | grep kv_disk)"
srv_stop

# restart: read back at start; the same request takes its prompt from the cache, same answer
srv_start --kv-cache-dir "$KVD" --kv-cache-min-tokens 64 || { bad "server restarts"; finish; exit 1; }
grep -q -- "--kv-cache-dir .*: 1 prefixes" "$SRV_LOG" && ok "start: one prefix read back" || bad "start log: $(cat "$SRV_LOG")"
chat "$M1"
pyck "d['usage']['prompt_tokens_details']['cached_tokens']==$P1-1 and d['choices'][0]['message']['content']=='''$A1'''" \
  && ok "after a restart: the prompt comes from the disk cache ($P1-1 of $P1), same answer" || bad "after restart: $BODY"
h=$(metric g4tp_kv_disk_loaded_tokens_total)
[ "${h:-0}" -gt 0 ] && ok "/metrics: $h positions read from disk" || bad "/metrics: loaded=$h"
if command -v promtool >/dev/null; then
  curl -s "$URL/metrics" | awk '/^# (HELP|TYPE) g4tp_kv_disk_/ || /^g4tp_kv_disk_/' > "$SRV_TMP/m.txt"
  promtool check metrics < "$SRV_TMP/m.txt" > "$SRV_TMP/promtool.log" 2>&1 && ok "promtool: the g4tp_kv_disk_ metrics are clean" \
    || bad "promtool: $(cat "$SRV_TMP/promtool.log")"
fi
srv_stop

# a damaged file is refused at start, removed, and nothing of it is used
f=$(ls "$KVD"/*.r0of1.kv | head -1)
python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-30]^=1; open(p,'wb').write(b)" "$f"
srv_start --kv-cache-dir "$KVD" --kv-cache-min-tokens 64 || { bad "server starts with a damaged file"; finish; exit 1; }
grep -q "refused (removed).*checksum" "$SRV_LOG" && ok "a damaged file: refused with a log line" || bad "damaged: $(cat "$SRV_LOG")"
chat "$M1"
pyck "d['usage']['prompt_tokens_details']['cached_tokens']==0 and d['choices'][0]['message']['content']=='''$A1'''" \
  && ok "... and not used: computed again, same answer" || bad "after refusal: $BODY"
srv_stop

# an image in the prompt: its tokens' KV (keyed by the pixels) survives a restart, bit for bit
VM=tests/data/vision/demo_vision; IMG=tests/data/vision/demo/red.png; KVI="$SRV_TMP/kvi"
IREQ=$(printf '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,%s"}},{"type":"text","text":"What colour is this picture?"}]}],"temperature":0,"max_tokens":8,"logprobs":true,"top_logprobs":5}' "$(base64 -w0 "$IMG")")
LP="json.dumps([[t['logprob']]+[x['logprob'] for x in t['top_logprobs']] for t in d['choices'][0]['logprobs']['content']])"
srv_start --model "$VM" --kv-cache-dir "$KVI" --kv-cache-min-tokens 16 || { bad "vision server starts"; finish; exit 1; }
post /v1/chat/completions "$IREQ"; I1=$(pyget "$LP"); IP=$(pyget "d['usage']['prompt_tokens']")
for i in $(seq 1 $((100 * SLOW))); do [ "$(metric g4tp_kv_disk_saves_total)" = 1 ] && break; sleep 0.1; done
srv_stop
srv_start --model "$VM" --kv-cache-dir "$KVI" --kv-cache-min-tokens 16 || { bad "vision server restarts"; finish; exit 1; }
post /v1/chat/completions "$IREQ"
pyck "d['usage']['prompt_tokens_details']['cached_tokens']==$IP-1" && [ "$(pyget "$LP")" = "$I1" ] \
  && ok "an image prompt after a restart: from the disk cache ($IP-1 of $IP), the same logprobs bit for bit" || bad "image after restart: $BODY"
srv_stop

# MPI ranks: each process writes and reads its own rank file; the second run hits
if command -v mpirun >/dev/null; then
  KVM="$SRV_TMP/kvm"; MPI=(timeout $((180 * SLOW)) mpirun --oversubscribe --allow-run-as-root -np 2 --bind-to none --mca btl self,tcp --mca plm_rsh_agent false)
  o1=$(echo "What is the capital of France?" | "${MPI[@]}" "$G4TP" chat --comm mpi --temperature 0 --stats --kv-cache-dir "$KVM" --kv-cache-min-tokens 8 2>&1)
  o2=$(echo "What is the capital of France?" | "${MPI[@]}" "$G4TP" chat --comm mpi --temperature 0 --stats --kv-cache-dir "$KVM" --kv-cache-min-tokens 8 2>&1)
  ls "$KVM" | grep -q 'r0of2.kv$' && ls "$KVM" | grep -q 'r1of2.kv$' && printf '%s' "$o2" | grep -q "1 prefixes" \
    && printf '%s' "$o2" | grep -Eq "prompt 20 tokens, 19 from the cache" && printf '%s' "$o2" | grep -q "Paris" \
    && ok "MPI (2 processes): one file per rank, read back by the next run, which hits" || bad "MPI: $o1 // $o2 // $(ls "$KVM")"
fi

# slots: off without --slot-save-path
srv_start --max-seqs 4 || { bad "server starts"; finish; exit 1; }
post /slots/0?action=save '{"filename":"a.bin"}'
expect_eq "$CODE" 501 "slot save without --slot-save-path: 501"
BODY=$(curl -s "$URL/slots")
pyck "len(d)==4 and d[0]['id']==0 and 'is_processing' in d[0] and d[0]['n_ctx']>0" && ok "GET /slots lists 4 slots" || bad "GET /slots: $BODY"
srv_stop

SAVE="$SRV_TMP/slots"; mkdir -p "$SAVE"
srv_start --max-seqs 1 --slot-save-path "$SAVE" || { bad "server starts"; finish; exit 1; }
chat "$M1"
post /slots/0?action=save '{"filename":"france.bin"}'
pyck "d['id_slot']==0 and d['filename']=='france.bin' and d['n_saved']>=$P1 and d['n_written']>0 and d['timings']['save_ms']>=0" \
  && ok "save: llama-server's answer ($(pyget "d['n_saved']") tokens)" || bad "save: $CODE $BODY"
[ -f "$SAVE/france.bin.meta" ] && [ -f "$SAVE/france.bin.r0of1.kv" ] && ok "save: the files are in --slot-save-path" || bad "files: $(ls "$SAVE")"
for fn in '../x.bin' '/tmp/x.bin' '.hidden' 'a/b' '' 'x\u0000y'; do
  post /slots/0?action=save "{\"filename\":\"$fn\"}"
  expect_eq "$CODE" 400 "save to \"$fn\" is refused"
done
ln -s /etc/passwd "$SAVE/link.bin.meta"
post /slots/0?action=restore '{"filename":"link.bin"}'
[ "$CODE" != 200 ] && ok "restore through a symlink: refused ($CODE)" || bad "symlink restore: $BODY"
post /slots/0?action=restore '{"filename":"missing.bin"}'
expect_eq "$CODE" 404 "restore of a missing file: 404"
post /slots/7?action=save '{"filename":"a.bin"}'
expect_eq "$CODE" 400 "an unknown slot: 400"
post /slots/0?action=dance '{"filename":"a.bin"}'
expect_eq "$CODE" 400 "an unknown action: 400"
post /slots/0?action=erase '{}'
pyck "d['id_slot']==0 and d['n_erased']>0" && ok "erase: n_erased" || bad "erase: $BODY"
post /slots/0?action=save '{"filename":"b.bin"}'
expect_eq "$CODE" 404 "save after erase: nothing to save"
srv_stop

# restore into a fresh server: the next request takes the prefix from the cache
srv_start --max-seqs 1 --slot-save-path "$SAVE" || { bad "server starts"; finish; exit 1; }
post /slots/0?action=restore '{"filename":"france.bin"}'
pyck "d['id_slot']==0 and d['n_restored']>=$P1 and d['n_read']>0" && ok "restore: llama-server's answer" || bad "restore: $CODE $BODY"
chat "$M1"
pyck "d['usage']['prompt_tokens_details']['cached_tokens']==$P1-1 and d['choices'][0]['message']['content']=='''$A1'''" \
  && ok "after restore: the prompt comes from the cache, same answer" || bad "after restore: $BODY"
srv_stop
finish
